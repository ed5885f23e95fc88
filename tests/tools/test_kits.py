"""`layoutc kit`: each kit, written into a temp dir, run by pytest in a child process against the
installed engine (vLLM 0.32; SGLang 0.5.23 through LAYOUTC_SGLANG_PATH): it passes where the
contract models the release, and fails naming rows when the engine's function is mutated
(a conftest.py beside the kit monkeypatches the engine: a pad count or a fill), refuses a
release the contract does not model, and names a renamed function."""

from __future__ import annotations

import ast
import atexit
import json
import os
import re
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from layoutc.cli import main
from tests.support import vllm_release

pytestmark = [pytest.mark.conformance, pytest.mark.engine, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


#: Each (contract, driver)'s kit text, written by `layoutc kit` once a session: the configurations are z3's
#: picks over the contract (seconds to tens of seconds per kit), the same for every test of that kit, so the
#: tests that mutate the engine run the very kit the first test wrote (each test writes it into its own dir).
_KITS: dict[tuple[str, str], str] = {}


def _write_kit(tmp_path: Path, contract: str, driver: str) -> Path:
    out = tmp_path / f"test_kit_{driver}.py"
    if (contract, driver) in _KITS:
        out.write_text(_KITS[contract, driver])
    else:
        assert main(["kit", str(ROOT / "contracts" / f"{contract}.moe"), "--path", driver, "--out", str(out)]) == 0
        _KITS[contract, driver] = out.read_text()
    imported = set()
    for node in ast.walk(ast.parse(out.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported.add(node.module.split(".")[0])
    assert not imported & {"layoutc", "z3", "lark"}, imported  # the kit never imports layoutc
    return out


# A kit's child is `python -m pytest KIT` in the kit's folder. Importing the engine is most of a child's
# time (vLLM 0.32's fused_moe: ~10 s of CPU), so the children of one environment are forked from one
# server that imported torch, pytest and the engine's first module (FIRST_IMPORT) once. Each fork is a
# fresh child: it runs pytest.main on the kit in its own folder with its own conftest.py (the mutation
# patches only that child's engine), its stdout/stderr go to files, and its exit status is the test's.
# SGLang is not preloaded: the kit's engine_setup must run before SGLang is imported. Forking after
# OpenMP started would hang the child (libgomp is not fork-safe), so the server first forks a probe that
# runs a parallel torch op; if the probe fails the server says so and the kits run as plain subprocesses.
PRELOAD = {"vllm": ("torch", "pytest", vllm_release.FIRST_IMPORT), "sglang": ("torch", "pytest")}

SERVER = r"""
import importlib, json, os, signal, sys, traceback
for name in sys.argv[1:]:
    importlib.import_module(name)
import pytest, torch

def child(request):
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]  # as `python -m pytest` puts the working folder first
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    return int(pytest.main(request["args"]))

def fork(run, request):
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            code = run(request)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime

def probe(request):
    signal.alarm(60)
    x = torch.ones(1 << 22)
    x.add_(1)
    return 0 if float(x.sum()) == float(1 << 23) else 1

os.write(1, (json.dumps({"fork": fork(probe, None)[0] == 0}) + "\n").encode())
for line in sys.stdin.buffer:
    rc, cpu = fork(child, json.loads(line))
    os.write(1, (json.dumps({"rc": rc, "cpu_s": round(cpu, 2)}) + "\n").encode())
"""


class _Server:
    """One environment's fork server (SERVER above), started on first use and kept for the session."""

    def __init__(self, env: dict[str, str], preload: tuple[str, ...]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, *preload], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, start_new_session=True)
        self.forks = bool(json.loads(self._reply(900))["fork"])

    def _reply(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            self.close()
            raise subprocess.TimeoutExpired(self.proc.args, timeout) if not ready else \
                RuntimeError(f"the kit server exited ({self.proc.returncode})")
        return line.decode()

    def run(self, cwd: Path, args: list[str], timeout: float) -> tuple[int, str, str]:
        assert self.proc.stdin is not None
        out, err = cwd / ".kit-stdout", cwd / ".kit-stderr"
        request = {"cwd": str(cwd), "args": args, "stdout": str(out), "stderr": str(err)}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        reply = json.loads(self._reply(timeout))
        self.cpu_s = float(reply["cpu_s"])  # the child's CPU seconds (user + system), for measuring
        rc = int(reply["rc"])
        return rc, out.read_text(errors="replace"), err.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


_SERVERS: dict[tuple[tuple[str, str], ...], _Server] = {}


@atexit.register
def _close_servers() -> None:
    for server in _SERVERS.values():
        server.close()


def _run_kit(kit: Path, conftest: str = "", args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> \
        subprocess.CompletedProcess[str]:
    if conftest:
        (kit.parent / "conftest.py").write_text(conftest)
    # README: SGLang's Python; the README's command gives it relative to the checkout, and the kit
    # runs in its own folder, so it is made absolute here
    sglang = str((ROOT / os.environ.get("LAYOUTC_SGLANG_PATH", ".venv-sglang")).resolve())
    child_env = {**os.environ, "LAYOUTC_SGLANG_PATH": sglang, **(env or {})}
    child_env.pop("PYTEST_ADDOPTS", None)
    pytest_args = ["-q", "-p", "no:cacheprovider", "-x", str(kit), *args]
    engine = re.search(r"^ENGINE = '(\w+)'$", kit.read_text(), re.M)
    key = (*sorted(child_env.items()), ("ENGINE", engine.group(1) if engine else ""))
    if key not in _SERVERS:
        _SERVERS[key] = _Server(child_env, PRELOAD.get(key[-1][1], ("torch", "pytest")))
    server = _SERVERS[key]
    command = [sys.executable, "-m", "pytest", *pytest_args]
    if not server.forks:
        return subprocess.run(command, cwd=kit.parent, env=child_env, capture_output=True, text=True, timeout=900)
    try:
        rc, out, err = server.run(kit.parent, pytest_args, 900)
    except (subprocess.TimeoutExpired, RuntimeError):  # the server is gone (killed on a timeout): the next starts anew
        del _SERVERS[key]
        raise
    return subprocess.CompletedProcess(command, rc, out, err)


CPU_MOE = "vllm.model_executor.layers.fused_moe.experts.cpu_moe"

# fill mutation: the engine writes 1.0 into w2's pad columns after padding
MUTATE_FILL = f"""
import importlib
cpu_moe = importlib.import_module({CPU_MOE!r})
original = cpu_moe.CPUUnquantizedExperts._pad_moe_intermediate
def mutated(self, layer):
    original(self, layer)
    i = self.moe_config.intermediate_size_per_partition
    layer.w2_weight.data[:, :, i:] = 1.0
cpu_moe.CPUUnquantizedExperts._pad_moe_intermediate = mutated
"""

# pad-count mutation: the engine rounds the shard up one tile past its own round-up (a padded size its
# gate still admits, whichever configuration the solver picked and whatever the ISA class's tile)
MUTATE_COUNT = f"""
import importlib
cpu_moe = importlib.import_module({CPU_MOE!r})
original = cpu_moe.CPUUnquantizedExperts._padded_intermediate_size.__func__
@classmethod
def mutated(cls, moe_config):
    padded = original(cls, moe_config)
    if padded == moe_config.intermediate_size_per_partition:
        return padded
    return padded + cls._intermediate_alignment()
cpu_moe.CPUUnquantizedExperts._padded_intermediate_size = mutated
"""

RENAMED = f"""
import importlib
cpu_moe = importlib.import_module({CPU_MOE!r})
del cpu_moe.CPUUnquantizedExperts._pad_moe_intermediate
"""

# a release no contract models (0.33.0 and 0.34.0 joined vllm_cpu_grouped_gemm with the release matrix)
NEW_RELEASE = "import vllm\nvllm.__version__ = '0.35.0'\n"


@pytest.mark.parametrize("contract, driver", [
    ("vllm_cpu_grouped_gemm", "vllm_cpu_unquantized"),
    ("flashinfer_nvfp4_moe", "flashinfer_nvfp4_align"),
    ("vllm_cpu_int8_moe", "vllm_cpu_int8"),
    ("marlin_moe_wna16", "marlin_wna16"),
    ("aiter_unquantized_moe", "aiter_unquantized"),
    ("sglang_cpu_moe", "sglang_cpu_unquantized"),
    ("sglang_cpu_fp8_moe", "sglang_cpu_fp8"),
    ("aiter_fused_moe", "aiter_mxfp4"),
    ("sglang_cpu_mxfp4_moe", "sglang_cpu_mxfp4"),
    ("marlin_moe_fp8", "marlin_mxfp8"),
])
def test_kit_passes_on_the_release_its_contract_models(tmp_path: Path, contract: str, driver: str) -> None:
    kit = _write_kit(tmp_path, contract, driver)
    done = _run_kit(kit, args=("-rx",))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", done.stdout) and not re.search(r"\d+ (failed|error)", done.stdout), done.stdout[-2000:]
    # the only tolerated xfail is a disagreement the driver names (Marlin: a pinned vLLM bug)
    for line in done.stdout.splitlines():
        if line.startswith("XFAIL"):
            assert re.search(r": known (gptq_int4_channelwise_ipp_not_8|mxfp4_ipp_not_32) ", line), line


@pytest.mark.parametrize("mutation, expect", [
    (MUTATE_FILL, "w2 rank 0: "),
    (MUTATE_COUNT, "w13 rank 0: engine ("),
])
def test_vllm_cpu_unquantized_kit_fails_naming_rows_on_a_mutated_engine(tmp_path: Path, mutation: str,
                                                                        expect: str) -> None:
    kit = _write_kit(tmp_path, "vllm_cpu_grouped_gemm", "vllm_cpu_unquantized")
    done = _run_kit(kit, mutation, ("-k", "test_engine_pads_like_the_contract"))
    assert done.returncode == 1, done.stdout[-4000:]
    assert "differs from contract vllm_cpu_grouped_gemm" in done.stdout, done.stdout[-4000:]
    assert expect in done.stdout, done.stdout[-4000:]
    if mutation is MUTATE_FILL:
        assert re.search(r"w2 rank 0: \d+ of \d+ elements differ \(dim 2 indices \d", done.stdout)  # pad columns named
        # 1.0 where the fill 0 belongs, in the dtype of the configuration the solver picked
        one = {"bfloat16": "[128, 63]", "float16": "[0, 60]", "float32": "[0, 0, 128, 63]"}
        dtype = re.search(r"differs from contract \S+ at \{[^}]*'dtype': '(\w+)'", done.stdout)
        assert dtype and dtype.group(1) in one, done.stdout[-4000:]
        engine = one[dtype.group(1)]
        zero = "[" + ", ".join(["0"] * (engine.count(",") + 1)) + "]"
        assert f"engine bytes {engine}, contract bytes {zero}" in done.stdout, done.stdout[-4000:]


def test_kit_refuses_a_release_the_contract_does_not_model(tmp_path: Path) -> None:
    kit = _write_kit(tmp_path, "vllm_cpu_grouped_gemm", "vllm_cpu_unquantized")
    done = _run_kit(kit, NEW_RELEASE, ("-k", "0-aligned"))
    assert done.returncode == 1
    assert "vllm 0.35.0 is not modelled by contract vllm_cpu_grouped_gemm (it models vllm 0.32.0" \
        in done.stdout, done.stdout[-3000:]


def test_kit_names_a_renamed_engine_function(tmp_path: Path) -> None:
    kit = _write_kit(tmp_path, "vllm_cpu_grouped_gemm", "vllm_cpu_unquantized")
    done = _run_kit(kit, RENAMED, ("-k", "0-aligned"))
    assert done.returncode == 1
    assert f"vllm 0.32.0 renamed or removed {CPU_MOE}:CPUUnquantizedExperts._pad_moe_intermediate" in done.stdout, \
        done.stdout[-3000:]


FI = "vllm.model_executor.layers.quantization.utils.flashinfer_utils"

# pad-count mutation: the intermediate aligned to 128 instead of vLLM's 64
MUTATE_NVFP4_COUNT = f"""
import importlib
importlib.import_module("vllm.model_executor.layers.fused_moe")
fi = importlib.import_module({FI!r})
original = fi.align_fp4_moe_weights_for_fi
def mutated(w13, w13_scale, w2, w2_scale, is_act_and_mul, min_alignment=16):
    return original(w13, w13_scale, w2, w2_scale, is_act_and_mul, min_alignment=128)
fi.align_fp4_moe_weights_for_fi = mutated
"""

# fill mutation: the w2 block scales' pad columns hold 0x7F (e4m3fn NaN) instead of the fill 0
MUTATE_NVFP4_FILL = f"""
import importlib
importlib.import_module("vllm.model_executor.layers.fused_moe")
fi = importlib.import_module({FI!r})
original = fi.align_fp4_moe_weights_for_fi
def mutated(w13, w13_scale, w2, w2_scale, is_act_and_mul, min_alignment=16):
    out = list(original(w13, w13_scale, w2, w2_scale, is_act_and_mul, min_alignment))
    i_pp = w2_scale.shape[-1] * 16
    out[3].view(__import__("torch").uint8)[..., i_pp // 16:] = 0x7F
    return tuple(out)
fi.align_fp4_moe_weights_for_fi = mutated
"""


@pytest.mark.parametrize("mutation, expect", [
    (MUTATE_NVFP4_COUNT, r"w13_weight: engine \(\d+, \d+, \d+\) torch.uint8, contract"),
    (MUTATE_NVFP4_FILL, r"w2_weight_scale: \d+ of \d+ elements differ \(dim 2 indices \[?\d+"),
])
def test_flashinfer_nvfp4_kit_fails_naming_rows_on_a_mutated_engine(tmp_path: Path, mutation: str,
                                                                    expect: str) -> None:
    kit = _write_kit(tmp_path, "flashinfer_nvfp4_moe", "flashinfer_nvfp4_align")
    done = _run_kit(kit, mutation, ("-k", "test_engine_pads_like_the_contract"))
    assert done.returncode == 1, done.stdout[-4000:]
    assert "differs from contract flashinfer_nvfp4_moe" in done.stdout, done.stdout[-4000:]
    assert re.search(expect, done.stdout), done.stdout[-4000:]


def test_kit_needs_the_contracts_models_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """LR184: without a `models vllm` line the contract states no release; nothing is written."""
    text = (ROOT / "contracts" / "vllm_cpu_grouped_gemm.moe").read_text()
    stripped = "\n".join(line for line in text.splitlines() if not line.startswith("models "))
    assert stripped != text
    contract = tmp_path / "vllm_cpu_grouped_gemm.moe"
    contract.write_text(stripped + "\n")
    out = tmp_path / "test_kit.py"
    assert main(["kit", str(contract), "--path", "vllm_cpu_unquantized", "--out", str(out)]) == 2
    assert "error[LR184]: vllm_cpu_grouped_gemm has no `models vllm` line" in capsys.readouterr().err
    assert not out.exists()


DEVICE_OP = f"""
import importlib
import torch
cpu_moe = importlib.import_module({CPU_MOE!r})
original = cpu_moe.CPUUnquantizedExperts._pad_moe_intermediate
def moved(self, layer):
    layer.w2_weight.data = layer.w2_weight.data.to("cuda")  # a release that pads on the device
    original(self, layer)
cpu_moe.CPUUnquantizedExperts._pad_moe_intermediate = moved
"""


def test_kit_stops_at_the_first_device_only_operation_and_names_it(tmp_path: Path) -> None:
    """The path reaching a device is a failure naming the operation and the engine line, never a pass or a skip."""
    kit = _write_kit(tmp_path, "vllm_cpu_grouped_gemm", "vllm_cpu_unquantized")
    done = _run_kit(kit, DEVICE_OP, ("-k", "0-aligned and test_engine_pads"))
    assert done.returncode == 1, done.stdout[-3000:]
    assert "the path stopped at the first device-only operation" in done.stdout, done.stdout[-3000:]
    assert re.search(r"called at \S*conftest\.py:\d+ \(moved", done.stdout), done.stdout[-3000:]


def test_sglang_kit_fails_naming_rows_when_the_config_update_pads_less(tmp_path: Path) -> None:
    """SGLang's config update rounded to 16 instead of its 32 (a pad count mutation): the padded size
    and every rank's tensors differ, named."""
    kit = _write_kit(tmp_path, "sglang_cpu_moe", "sglang_cpu_unquantized")
    text = kit.read_text()
    # the mutation wraps SGLang's own function once the kit's set-up made SGLang importable
    text = text.replace("def engine_setup() -> None:\n    sglang_setup()",
                        "def engine_setup() -> None:\n    sglang_setup()\n"
                        "    from sglang.srt.configs import update_config\n"
                        "    original = update_config.adjust_config_with_unaligned_cpu_tp\n"
                        "    def mutated(model_config, load_config, tp_size):\n"
                        "        full = model_config.hf_config.moe_intermediate_size\n"
                        "        out = original(model_config, load_config, tp_size)\n"
                        "        per_rank = -(-full // tp_size)\n"
                        "        model_config.hf_config.moe_intermediate_size = -(-per_rank // 16) * 16 * tp_size\n"
                        "        return out\n"
                        "    update_config.adjust_config_with_unaligned_cpu_tp = mutated")
    assert "mutated" in text
    kit.write_text(text)
    done = _run_kit(kit, args=("-k", "test_engine_pads_like_the_contract"))
    assert done.returncode == 1, done.stdout[-4000:]
    assert "sglang 0.5.23 differs from contract sglang_cpu_moe" in done.stdout, done.stdout[-4000:]
    assert re.search(r"padded intermediate: 1 of 1 elements differ", done.stdout), done.stdout[-4000:]


def _mutate_sglang_setup(kit: Path, lines: str) -> None:
    """Append `lines` (4-space indented) to the kit's engine_setup, which makes SGLang importable first."""
    text = kit.read_text()
    head = "def engine_setup() -> None:\n    sglang_setup()"
    assert head in text
    kit.write_text(text.replace(head, head + "\n" + lines))


# fill mutation: SGLang's CPU padded loader resets a short rank's rows to 1 instead of 0
SGLANG_FILL_ONE = """    from sglang.srt.model_loader import weight_utils
    def mutated(param_data, dim, start, length):
        if length:
            param_data.narrow(dim, start, length).fill_(1)
    weight_utils.reset_param_data_if_needed = mutated"""

# pad-count mutation: the FP8 config update, where it pads, pads each rank by one more 128 block
SGLANG_FP8_COUNT = """    from sglang.srt.configs import update_config
    original = update_config.adjust_config_with_unaligned_cpu_tp
    def mutated(model_config, load_config, tp_size):
        full = model_config.hf_config.moe_intermediate_size
        out = original(model_config, load_config, tp_size)
        if model_config.hf_config.moe_intermediate_size != full:
            model_config.hf_config.moe_intermediate_size += 128 * tp_size
        return out
    update_config.adjust_config_with_unaligned_cpu_tp = mutated"""


@pytest.mark.parametrize("mutation, expect", [
    (SGLANG_FILL_ONE, r"(w13_weight|w13_weight_scale_inv|w2_weight|w2_weight_scale_inv) rank [1-9]\d*: \d+ of \d+ "
                      r"elements differ \((everywhere|dim \d indices \[?\d+)"),
    (SGLANG_FP8_COUNT, r"padded intermediate: 1 of 1 elements differ"),
], ids=["fill", "pad_count"])
def test_sglang_fp8_kit_fails_naming_rows_on_a_mutated_engine(tmp_path: Path, mutation: str, expect: str) -> None:
    """SGLang's CPU FP8 loader filling a short rank's pad with 1, or its config update padding a block more:
    the kit fails naming the tensor, the rank and the rows."""
    kit = _write_kit(tmp_path, "sglang_cpu_fp8_moe", "sglang_cpu_fp8")
    _mutate_sglang_setup(kit, mutation)
    done = _run_kit(kit, args=("-k", "test_engine_pads_like_the_contract"))
    assert done.returncode == 1, done.stdout[-4000:]
    assert "sglang 0.5.23 differs from contract sglang_cpu_fp8_moe" in done.stdout, done.stdout[-4000:]
    assert re.search(expect, done.stdout), done.stdout[-4000:]


MXFP4 = "vllm.model_executor.layers.fused_moe.oracle.mxfp4"

# pad-count mutation: AITER MXFP4's intermediate rounded to 64 instead of its 128 / 256
MUTATE_AITER_MXFP4_COUNT = f"""
import importlib
mxfp4 = importlib.import_module({MXFP4!r})
original = mxfp4.mxfp4_round_up_hidden_size_and_intermediate_size
def mutated(backend, hidden_size, intermediate_size, activation=None):
    h, _ = original(backend, hidden_size, intermediate_size, activation)
    return h, -(-intermediate_size // 64) * 64
mxfp4.mxfp4_round_up_hidden_size_and_intermediate_size = mutated
"""


def test_aiter_mxfp4_kit_fails_naming_rows_on_a_mutated_engine(tmp_path: Path) -> None:
    """vLLM's AITER MXFP4 round-up padding to 64: the padded size, the pad count handed to AITER and
    the tensors differ, named."""
    kit = _write_kit(tmp_path, "aiter_fused_moe", "aiter_mxfp4")
    done = _run_kit(kit, MUTATE_AITER_MXFP4_COUNT, ("-k", "test_engine_pads_like_the_contract"))
    assert done.returncode == 1, done.stdout[-4000:]
    assert "vllm 0.32.0 differs from contract aiter_fused_moe" in done.stdout, done.stdout[-4000:]
    assert "padded intermediate: 1 of 1 elements differ" in done.stdout, done.stdout[-4000:]
    assert re.search(r"w13 rank 0: engine \(\d+, \d+, \d+\) torch.bfloat16, contract", done.stdout), done.stdout[-4000:]


# fill mutation: SGLang's MXFP4 create_weights fills the E8M0 scales with 0 (2^-127) instead of 127 (1.0)
SGLANG_MXFP4_SCALE_FILL = """    from sglang.srt.layers.quantization import mxfp4
    mxfp4._UE8M0_ONE = 0"""

# pad-count mutation: the MXFP4 config update, where it pads, pads each rank by 64 more
SGLANG_MXFP4_COUNT = SGLANG_FP8_COUNT.replace("128 * tp_size", "64 * tp_size")


@pytest.mark.parametrize("mutation, expect", [
    (SGLANG_MXFP4_SCALE_FILL, r"w(13|2)_weight_scale rank \d+: \d+ of \d+ elements differ \(dim 1 indices \[?\d+"),
    (SGLANG_MXFP4_COUNT, r"padded intermediate: 1 of 1 elements differ"),
], ids=["scale_fill", "pad_count"])
def test_sglang_mxfp4_kit_fails_naming_rows_on_a_mutated_engine(tmp_path: Path, mutation: str, expect: str) -> None:
    """SGLang's MXFP4 create_weights filling the scales' pad with 0 instead of its E8M0 one, or its
    config update padding 64 more per rank: the kit fails naming the tensor, the rank and the rows."""
    kit = _write_kit(tmp_path, "sglang_cpu_mxfp4_moe", "sglang_cpu_mxfp4")
    _mutate_sglang_setup(kit, mutation)
    done = _run_kit(kit, args=("-k", "test_engine_pads_like_the_contract"))
    assert done.returncode == 1, done.stdout[-4000:]
    assert "sglang 0.5.23 differs from contract sglang_cpu_mxfp4_moe" in done.stdout, done.stdout[-4000:]
    assert re.search(expect, done.stdout), done.stdout[-4000:]


FI_FIRST = ("vllm.model_executor.layers.fused_moe.experts.cpu_moe", "vllm.model_executor.layers.fused_moe")

# pad-count mutation: MXFP8's intermediate aligned to 64 instead of vLLM's 128
MUTATE_MXFP8_COUNT = f"""
import importlib
for name in {FI_FIRST!r}:
    importlib.import_module(name)
fi = importlib.import_module({FI!r})
original = fi.align_mxfp8_moe_weights_for_fi_trtllm
def mutated(w13, w2, w13_scale, w2_scale, is_act_and_mul, min_alignment, hidden_alignment):
    return original(w13, w2, w13_scale, w2_scale, is_act_and_mul, 64, hidden_alignment)
fi.align_mxfp8_moe_weights_for_fi_trtllm = mutated
"""

# fill mutation: the w2 UE8M0 scales' padded hidden rows hold 0 (2^-127) instead of 127 (1.0)
MUTATE_MXFP8_FILL = f"""
import importlib
for name in {FI_FIRST!r}:
    importlib.import_module(name)
fi = importlib.import_module({FI!r})
original = fi.align_mxfp8_moe_weights_for_fi_trtllm
def mutated(w13, w2, w13_scale, w2_scale, is_act_and_mul, min_alignment, hidden_alignment):
    out = list(original(w13, w2, w13_scale, w2_scale, is_act_and_mul, min_alignment, hidden_alignment))
    out[3] = out[3].clone()
    out[3][:, w2.shape[1]:] = 0
    return tuple(out)
fi.align_mxfp8_moe_weights_for_fi_trtllm = mutated
"""


@pytest.mark.parametrize("mutation, expect", [
    ("", None),
    (MUTATE_MXFP8_COUNT, r"w13_weight: engine \(\d+, \d+, \d+\) torch.uint8, contract"),
    (MUTATE_MXFP8_FILL, r"w2_weight_scale: \d+ of \d+ elements differ \(dim 1 indices \[?\d+"),
], ids=["release", "pad_count", "fill"])
def test_flashinfer_mxfp8_kit_on_vllm_034(tmp_path: Path, mutation: str, expect: str | None) -> None:
    """The MXFP8 alignment kit against vLLM 0.34's wheel Python (fetched at test time, tests/support/vllm_release.py;
    a named skip outside CI, a failure under CI when it cannot be fetched): it passes on the release its
    contract models, and fails naming rows when the alignment pads to 64 or fills the scales' pad with 0."""
    vllm_release.require("0.34.0")
    kit = _write_kit(tmp_path, "flashinfer_trtllm_mxfp8_moe", "flashinfer_mxfp8_align")
    args = ("-k", "test_engine_pads_like_the_contract") if mutation else ()
    done = _run_kit(kit, mutation, args, env=vllm_release.child_env("0.34.0", {}))
    if expect is None:
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert re.search(r"\d+ passed", done.stdout) and not re.search(r"\d+ (failed|error)", done.stdout)
        return
    assert done.returncode == 1, done.stdout[-4000:]
    assert "vllm 0.34.0 differs from contract flashinfer_trtllm_mxfp8_moe" in done.stdout, done.stdout[-4000:]
    assert re.search(expect, done.stdout), done.stdout[-4000:]


MARLIN_FP8 = "vllm.model_executor.layers.quantization.utils.marlin_utils_fp8"

# pad-count mutation: Marlin MXFP8 pads the intermediate to 128 instead of marlin_moe_padded_intermediate's
MUTATE_MARLIN_MXFP8_COUNT = f"""
import importlib
mod = importlib.import_module({MARLIN_FP8!r})
mod.marlin_moe_padded_intermediate = lambda n, group_size: -(-n // 128) * 128
"""

# fill mutation: w2's padded intermediate columns hold e4m3fn 1.0 (0x38) instead of 0
MUTATE_MARLIN_MXFP8_FILL = f"""
import importlib
mod = importlib.import_module({MARLIN_FP8!r})
original = mod._moe_pad_last
def mutated(x, n, padded_n):
    out = original(x, n, padded_n)
    if out.dtype == __import__("torch").float8_e4m3fn:
        out.view(__import__("torch").uint8)[..., n:] = 0x38
    return out
mod._moe_pad_last = mutated
"""


@pytest.mark.parametrize("mutation, expect", [
    (MUTATE_MARLIN_MXFP8_COUNT, r"w13_weight: engine \(\d+, \d+, \d+\) torch.uint8, contract"),
    (MUTATE_MARLIN_MXFP8_FILL, r"w2_weight: \d+ of \d+ elements differ \(dim 2 indices \[?\d+.*engine bytes \[56\]"),
], ids=["pad_count", "fill"])
def test_marlin_mxfp8_kit_fails_naming_rows_on_a_mutated_engine(tmp_path: Path, mutation: str, expect: str) -> None:
    """vLLM's Marlin MXFP8 preparation padding to 128, or writing 1.0 into w2's pad columns: the kit
    fails naming the tensor and the columns."""
    kit = _write_kit(tmp_path, "marlin_moe_fp8", "marlin_mxfp8")
    done = _run_kit(kit, mutation, ("-k", "test_engine_pads_like_the_contract"))
    assert done.returncode == 1, done.stdout[-4000:]
    assert "vllm 0.32.0 differs from contract marlin_moe_fp8" in done.stdout, done.stdout[-4000:]
    assert re.search(expect, done.stdout), done.stdout[-4000:]
