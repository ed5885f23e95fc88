"""transformers' own sparse-MoE block of one decoder layer at a time (issue 44 item 1).

`from_pretrained` builds every layer it keeps, in float32: 104 GB for a 30-layer
gemma-4-26B-A4B. `StreamingOracle` does what `from_pretrained` does, for one module of one
layer:

1. the model skeleton is built on the meta device with the real config.json, under the
   init contexts `from_pretrained` uses (`PreTrainedModel.get_init_context`): nothing is
   allocated, and no layer count is truncated, so heterogeneous configs (gemma-4's
   `layer_types`, Qwen3-Next's hybrid layers, DeepSeek's first dense layers, Jamba's periods)
   keep the layer indices of the checkpoint;
2. the layer's sparse-MoE block (or, without a block, its experts module) is found by
   `reference.moe_modules`;
3. every checkpoint key is renamed the way `from_pretrained` renames it
   (transformers/core_model_loading.py `rename_source_key`, with the model's own
   `conversion_mapping.get_model_conversion_mapping`), and the keys that land in that module
   are read through safetensors' own `safe_open` (or a `TensorSource`, the quantized path's
   dequantizer) and loaded by `convert_and_load_state_dict_in_model`, transformers' own
   loader: per-expert tensors merged into fused experts, gate/up concatenated, prefixes
   added or stripped by transformers, never by layoutc's declared format;
4. after the layer's rows, `release` moves the module back to the meta device.

Which model class: `AutoModelForCausalLM`'s for the config; where it has none, or it does not
load the layer, the class config.json's `architectures` names, then
`AutoModelForImageTextToText`'s (issue 45 item 3). A layer none of them loads has no
reference, and `why(layer)` says in words what each class did.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from layoutc.tools.checkpoints.oracle_layer import OracleLayer, moe_modules
from layoutc.tools.checkpoints.oracle_layer import first_line as _first_line

#: name -> a tensor, or an object with `get_dtype()` and `[...]` (safetensors' slice), as
#: `convert_and_load_state_dict_in_model` takes them.
Tensors = dict[str, Any]


@dataclass(frozen=True)
class TensorSource:
    """The tensors a layer is loaded from: `names`, every checkpoint tensor name; `read(keys)`,
    those keys' tensors (or safetensors slices), read only when asked."""

    names: tuple[str, ...]
    read: Callable[[list[str]], Tensors]


#: transformers' conversion ops that only move or split elements (transformers/core_model_loading.py): a
#: layer whose conversions are all of these is loaded in its stored dtype and cast to float32 after,
#: which gives the same float32 values bit for bit (a bf16 / f16 -> f32 cast is exact and commutes
#: with moving elements), without the float32 copies of every per-expert tensor, their stacks and
#: their concatenation that loading in float32 makes (Qwen3-MoE's 128 x 3 experts: issue 44).
MOVE_OPS = frozenset(
    {"_IdentityOp", "Chunk", "Concatenate", "Interleave", "MergeModulelist", "SplitModulelist", "Transpose"}
)
_NARROW = {"BF16": torch.bfloat16, "F16": torch.float16, torch.bfloat16: torch.bfloat16, torch.float16: torch.float16}


def load_dtype(tensors: Tensors, conversions: list[Any]) -> torch.dtype:
    """The dtype transformers loads a layer's `tensors` in: their stored dtype when every one of them
    is bfloat16 (or every one float16) and every converter in `conversions` (transformers'
    `WeightConverter` / `WeightRenaming` list) only moves elements (`MOVE_OPS`); float32 otherwise
    (a float32 or mixed source, or a conversion that computes). Either way the module is cast to
    float32 after loading, and its values are those `from_pretrained(dtype=float32)` gives."""
    ops = [type(op).__name__ for c in conversions for op in getattr(c, "operations", ())]
    if not tensors or any(name not in MOVE_OPS for name in ops):
        return torch.float32
    found = set()
    for t in tensors.values():
        dt = t.get_dtype() if hasattr(t, "get_dtype") else getattr(t, "dtype", None)
        found.add(_NARROW.get(dt, torch.float32))
    return found.pop() if len(found) == 1 else torch.float32


@contextlib.contextmanager
def _sync_load() -> Iterator[None]:
    """transformers' loader without its thread pool (`HF_DEACTIVATE_ASYNC_LOAD`, read by
    `convert_and_load_state_dict_in_model` at each call): each parameter's tensors are read when its
    conversion runs, not every tensor of the layer at once before the first conversion."""
    key = "HF_DEACTIVATE_ASYNC_LOAD"
    before = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


class FileSlice:
    """One tensor of a safetensors file, as safetensors' own slice object gives it to transformers'
    loader (`get_dtype()`, `get_shape()`, `[index]`), but read through a `safe_open` handle of its
    own, opened when indexed. safetensors maps the whole file and the tensors it returns are views of
    that mapping: with one handle for a layer's tensors, every page any of them touched stays resident
    while any one of them lives (a bf16 router weight kept as a parameter held the 1.2 GB layer
    mapped); with a handle per tensor, a tensor's pages go when it does (issue 44)."""

    def __init__(self, path: str, key: str, dtype: str, shape: list[int]) -> None:
        self.path, self.key, self._dtype, self._shape = path, key, dtype, shape

    def get_dtype(self) -> str:
        return self._dtype

    def get_shape(self) -> list[int]:
        return list(self._shape)

    def __getitem__(self, index: Any) -> Any:
        from safetensors import safe_open

        with safe_open(self.path, framework="pt") as handle:
            return handle.get_slice(self.key)[index]


def safetensors_source(folder: str) -> TensorSource:
    """The folder's tensors through safetensors' own `safe_open` (as `from_pretrained` reads them):
    model.safetensors.index.json's weight_map, or model.safetensors alone. `read` gives a `FileSlice`
    per key (each read through a handle of its own when transformers indexes it)."""
    from safetensors import safe_open

    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            files: dict[str, str] = dict(json.load(f)["weight_map"])
    else:
        single = os.path.join(folder, "model.safetensors")
        with safe_open(single, framework="pt") as h:
            files = dict.fromkeys(h.keys(), "model.safetensors")

    def read(keys: list[str]) -> Tensors:
        out: Tensors = {}
        by_file: dict[str, list[str]] = {}
        for key in keys:
            by_file.setdefault(files[key], []).append(key)
        for fname, names in by_file.items():
            path = os.path.join(folder, fname)
            with safe_open(path, framework="pt") as handle:  # the header only: nothing is read here
                for key in names:
                    part = handle.get_slice(key)
                    out[key] = FileSlice(path, key, part.get_dtype(), part.get_shape())
        return out

    return TensorSource(tuple(files), read)


@dataclass
class _Skeleton:
    """One model class on the meta device, with its conversions and each checkpoint key's target."""

    label: str
    model: Any
    conversions: list[Any]
    targets: dict[str, str]  # checkpoint key -> the model key transformers loads it into


class StreamingOracle:
    """`reference.Oracle`'s interface (`layers.get(n)`, `missing`, `why(n)`), one layer built at a time.

    folder: the checkpoint folder (config.json); source: where tensors come from (default:
    `safetensors_source(folder)`); config: config.json's dict to build from (default: the folder's). `layers.get(n)` builds layer n's module (float32, eval) and
    frees the one built before; `release()` frees it now. `build_s[n]`: seconds spent building
    layer n. Never raises for a layer transformers cannot build: `why(n)` says why.
    """

    def __init__(self, folder: str, source: TensorSource | None = None, config: dict[str, Any] | None = None) -> None:
        self.folder = folder
        self._source = source
        self._config = config
        self.missing = ""
        self._why: dict[int, str] = {}
        self._current: tuple[int, OracleLayer, _Skeleton] | None = None
        self._skeletons: list[_Skeleton | str] | None = None
        self.build_s: dict[int, float] = {}
        self.layers = _Layers(self)

    def why(self, layer: int) -> str:
        """Why `layer` has no module ("" when it has one or was not asked for)."""
        return self._why.get(layer, self.missing)

    def release(self) -> None:
        """Move the layer built last back to the meta device (its memory is freed)."""
        if self._current is not None:
            _, entry, _ = self._current
            self._current = None
            entry.module.to(device="meta")
            import gc

            gc.collect()

    def get(self, layer: int) -> OracleLayer | None:
        """Layer `layer`'s module, built now (the previous one released), or None (`why(layer)`)."""
        if self._current is not None and self._current[0] == layer:
            return self._current[1]
        self.release()
        if layer in self._why:
            return None
        start = time.perf_counter()
        try:
            entry = self._build(layer)
        finally:
            self.build_s[layer] = time.perf_counter() - start
        return entry

    def _build(self, layer: int) -> OracleLayer | None:
        import transformers

        from layoutc.tools.runmemory import bound_heap

        bound_heap()  # the read, converted and cast tensors are unmapped when freed, not kept in the heap

        log = transformers.utils.logging
        bar, verbosity = log.is_progress_bar_enabled(), log.get_verbosity()
        log.disable_progress_bar()  # type: ignore[no-untyped-call]
        log.set_verbosity_error()  # type: ignore[no-untyped-call]
        try:
            return self._load(transformers, layer)
        finally:
            log.set_verbosity(verbosity)
            if bar:
                log.enable_progress_bar()  # type: ignore[no-untyped-call]

    def _load(self, transformers: Any, layer: int) -> OracleLayer | None:
        skeletons = self._skeletons_once(transformers)
        tried: list[str] = []
        for sk in skeletons:
            if isinstance(sk, str):
                tried.append(sk)
                continue
            found = moe_modules(sk.model, [layer]).get(layer)
            if found is None:
                tried.append(f"{sk.label} has no experts module in layer {layer}")
                continue
            why = self._fill(sk, found)
            if not why:
                self._current = (layer, found, sk)
                return found
            found.module.to(device="meta")
            tried.append(f"{sk.label}: {why}")
        self._why[layer] = "transformers could not build layer {} alone ({})".format(layer, "; ".join(tried))
        return None

    def _skeletons_once(self, transformers: Any) -> list[_Skeleton | str]:
        if self._skeletons is None:
            self._skeletons = _skeletons(transformers, self.folder, self._source_once(), self._config)
        return self._skeletons

    def _source_once(self) -> TensorSource:
        if self._source is None:
            self._source = safetensors_source(self.folder)
        return self._source

    def _fill(self, sk: _Skeleton, entry: OracleLayer) -> str:
        """Load `entry.module`'s weights through transformers' loader; "" or what went wrong."""
        from transformers.core_model_loading import convert_and_load_state_dict_in_model
        from transformers.modeling_utils import LoadStateDictConfig

        prefix = entry.path + "."
        keys = [k for k, target in sk.targets.items() if target.startswith(prefix)]
        if not keys:
            return f"no checkpoint tensor is loaded into {entry.path}"
        try:
            tensors = self._source_once().read(keys)
            dtype = load_dtype(tensors, sk.conversions)
            if dtype != torch.float32:  # transformers loads into the meta parameters' dtype
                entry.module.to(dtype)
            config = LoadStateDictConfig(
                pretrained_model_name_or_path=self.folder,
                dtype=dtype,
                device_map={"": "cpu"},
                weight_mapping=sk.conversions,
            )
            with _sync_load():
                info, _ = convert_and_load_state_dict_in_model(sk.model, tensors, config)
        except (ValueError, KeyError, TypeError, RuntimeError, AttributeError, IndexError) as exc:
            return f"transformers' loader failed ({type(exc).__name__}: {_first_line(exc)})"
        finally:
            tensors = {}
        left = sorted(prefix + k for k in entry.module.state_dict() if prefix + k in info.missing_keys)
        bad = sorted(str(m[0]) for m in info.mismatched_keys if str(m[0]).startswith(prefix))
        errors = [f"{k}: {v}" for k, v in info.conversion_errors.items() if str(k).startswith(prefix)]
        if left or bad or errors:
            return "; ".join(
                filter(
                    None,
                    (
                        f"left unloaded: {', '.join(left[:4])}" if left else "",
                        f"shape mismatch: {', '.join(bad[:4])}" if bad else "",
                        f"conversion errors: {'; '.join(errors[:2])[:300]}" if errors else "",
                    ),
                )
            )
        still = [n for n, t in (*entry.module.named_parameters(), *entry.module.named_buffers()) if t.is_meta]
        if still:
            return f"holds {', '.join(still[:4])} that no checkpoint tensor fills"
        _to_float32(entry.module)
        return ""


def _to_float32(module: torch.nn.Module) -> None:
    """Cast `module`'s floating parameters and buffers to float32 in place (what `module.to(float32)`
    does) and put it in eval mode: first the small tensors (a router weight loaded in its stored dtype
    may still be a view of the file's mapping, and casting it lets the mapping go), then the rest
    largest first (each cast holds one tensor in both dtypes beside what is already cast)."""
    import gc

    gc.collect()  # transformers' loader leaves cycles that still reference the read tensors
    slots = [
        (m, kind, name)
        for m in module.modules()
        for kind in ("_parameters", "_buffers")
        for name, t in getattr(m, kind).items()
        if t is not None and t.is_floating_point()
    ]
    largest = max((getattr(m, k)[n].numel() for m, k, n in slots), default=0)

    def order(slot: tuple[Any, str, str]) -> tuple[bool, int]:
        n = getattr(slot[0], slot[1])[slot[2]].numel()
        return (n * 8 >= largest, -n)

    for m, kind, name in sorted(slots, key=order):
        t = getattr(m, kind)[name]
        if t.dtype != torch.float32:
            if kind == "_parameters":
                t.data = t.data.to(torch.float32)
            else:
                m._buffers[name] = t.to(torch.float32)
    module.eval()


class _Layers(Mapping[int, OracleLayer]):
    """`Oracle.layers`' mapping, built on demand (one layer held at a time)."""

    def __init__(self, oracle: StreamingOracle) -> None:
        self._oracle = oracle

    def __getitem__(self, layer: int) -> OracleLayer:
        entry = self._oracle.get(layer)
        if entry is None:
            raise KeyError(layer)
        return entry

    def __iter__(self) -> Iterator[int]:
        return iter(() if self._oracle._current is None else (self._oracle._current[0],))

    def __len__(self) -> int:
        return 0 if self._oracle._current is None else 1


def model_classes(transformers: Any, config: Any) -> list[tuple[str, Any]]:
    """The classes tried, in order: AutoModelForCausalLM's for this config, the class config.json's
    `architectures` names (if transformers has it), AutoModelForImageTextToText's; each once."""
    out: list[tuple[str, Any]] = []
    for auto in ("AutoModelForCausalLM",):
        cls = _auto_class(transformers, auto, config)
        if cls is not None:
            out.append((f"{auto} ({cls.__name__})", cls))
    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, str(name), None) if isinstance(name, str) else None
        if isinstance(cls, type) and all(c is not cls for _, c in out):
            out.append((f"config.json's architectures ({cls.__name__})", cls))
    cls = _auto_class(transformers, "AutoModelForImageTextToText", config)
    if cls is not None and all(c is not cls for _, c in out):
        out.append((f"AutoModelForImageTextToText ({cls.__name__})", cls))
    return out


def _auto_class(transformers: Any, auto: str, config: Any) -> Any:
    mapping = getattr(getattr(transformers, auto, None), "_model_mapping", None)
    if mapping is None:
        return None
    try:
        return mapping[type(config)]
    except (KeyError, ValueError):
        return None


def _skeletons(
    transformers: Any, folder: str, source: TensorSource, config_json: dict[str, Any] | None = None
) -> list[_Skeleton | str]:
    """Each class of `model_classes` built on the meta device (or, in words, why it was not), from
    `config_json` (a config.json's dict, e.g. without its quantization_config) or the folder's."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

    try:
        if config_json is None:
            config = transformers.AutoConfig.from_pretrained(folder)
        else:
            config = transformers.CONFIG_MAPPING[config_json["model_type"]].from_dict(config_json)
    except (ValueError, KeyError, OSError) as exc:
        return [f"transformers {transformers.__version__} cannot read this config.json ({_first_line(exc)})"]
    classes = model_classes(transformers, config)
    if not classes:
        return [
            f"transformers {transformers.__version__} has no causal-LM, architectures or image-text class "
            f"for model_type {getattr(config, 'model_type', '?')!r}"
        ]
    out: list[_Skeleton | str] = []
    for label, cls in classes:
        try:
            model = _meta_model(cls, config)
            conversions = get_model_conversion_mapping(model, None, None)
        except Exception as exc:  # a class transformers cannot build from this config.json
            out.append(f"{label} cannot be built ({type(exc).__name__}: {_first_line(exc)})")
            continue
        renamings = [c for c in conversions if isinstance(c, WeightRenaming)]
        converters = [c for c in conversions if isinstance(c, WeightConverter)]
        meta = model.state_dict()
        targets: dict[str, str] = {}
        for key in source.names:  # as convert_and_load_state_dict_in_model renames each key
            renamed, _ = rename_source_key(key, renamings, converters, model.base_model_prefix, meta)
            if renamed not in meta and key in meta:
                renamed, _ = rename_source_key(key, [], [], model.base_model_prefix, meta)
            if renamed in meta:
                targets[key] = renamed
        out.append(_Skeleton(label, model, conversions, targets))
    return out


def _meta_model(cls: Any, config: Any) -> Any:
    """`cls(config)` on the meta device, under from_pretrained's own init contexts (float32)."""
    import copy

    from transformers.utils.generic import ContextManagers

    contexts = cls.get_init_context(torch.float32, False, False, None)
    if not any(isinstance(c, torch.device) for c in contexts):
        contexts = [*contexts, torch.device("meta")]
    with ContextManagers(contexts):
        model = cls(copy.deepcopy(config))
    return model.eval()
