"""Shared helpers of the robustness tests (not a test module).

* ``run_layoutc``: the real CLI in a subprocess with a wall-time limit and an
  address-space limit, so that a hang or a runaway allocation in layoutc fails
  one test instead of the whole run.
* ``config_for``: one in-domain configuration of a checked contract.
* ``AUDIT_SCRIPT``: imports generated modules under ``sys.addaudithook`` and
  reports every sensitive event (see ``audit_import``).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CONTRACTS = sorted((REPO / "contracts").glob("*.moe"))
CASES = REPO / "tests" / "cases"
MEMORY_LIMIT = 3 << 30  # bytes of address space for each child

# The CLI in this process, then its peak resident memory (KiB) as the last line of stderr:
# VmHWM, not ru_maxrss, which keeps the forked parent's peak across exec (a child started with
# preexec_fn is forked from pytest's process, 1.8 GiB late in a full run).
PEAK_SCRIPT = r"""
import sys
from layoutc import cli
try:
    rc = cli.main(sys.argv[1:])
finally:
    with open("/proc/self/status") as fh:
        hwm = next(line.split()[1] for line in fh if line.startswith("VmHWM"))
    print(f"peak_kib={hwm}", file=sys.stderr)
sys.exit(rc)
"""


def limit_child(memory: int = MEMORY_LIMIT) -> None:
    """preexec_fn: cap the child's address space (a runaway big-int or list fails fast)."""
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


@dataclass
class Result:
    args: list[str]
    rc: int | None
    out: str
    err: str
    seconds: float
    timed_out: bool

    def describe(self) -> str:
        return (f"layoutc {' '.join(self.args)}\n  rc={self.rc} timed_out={self.timed_out} "
                f"seconds={self.seconds:.2f}\n  stdout: {self.out[-1500:]!r}\n  stderr: {self.err[-1500:]!r}")


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LAYOUTC_TRACEBACK", None)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_layoutc(args: list[str], timeout: float = 60, cwd: str | Path | None = None,
                env: dict[str, str] | None = None) -> Result:
    """`python -m layoutc ARGS` with a timeout (`env`: variables set on top of child_env());
    a timed-out child is killed (rc None)."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "layoutc", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd or REPO, env={**child_env(), **(env or {})},
                            preexec_fn=limit_child, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return Result(args, proc.returncode, out, err, time.monotonic() - start, False)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return Result(args, None, out, err, time.monotonic() - start, True)


def run_python(code: str, args: list[str], timeout: float = 60, stdin: str | None = None) -> Result:
    """`python -c CODE ARGS` under the same limits (`stdin`: text fed to the child)."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True, cwd=REPO, env=child_env(),
                            preexec_fn=limit_child, start_new_session=True)
    try:
        out, err = proc.communicate(stdin or "", timeout=timeout)
        return Result(args, proc.returncode, out, err, time.monotonic() - start, False)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return Result(args, None, out, err, time.monotonic() - start, True)


def crashed(text: str) -> bool:
    """A traceback or layoutc's internal-error report in CLI output."""
    return "Traceback (most recent call last)" in text or "LC900" in text


def configs_for(contract: Any) -> list[dict[str, Any]]:
    """Three in-domain configurations: all lowest, all highest, and ranges low with the
    last enum/set/bool value (exercises passing, failing `require` and failing `admit`
    paths of a generated plan())."""
    low, high = config_for(contract, "low"), config_for(contract, "high")
    mixed = {p.name: (low if p.kind == "range" else high)[p.name] for p in contract.params}
    return [low, high, mixed]


def config_for(contract: Any, pick: str = "low") -> dict[str, Any]:
    """One configuration inside every parameter's domain (`low`: the first value)."""
    config: dict[str, Any] = {}
    for p in contract.params:
        if p.kind == "range":
            config[p.name] = p.low if pick == "low" else p.high
        else:
            values = list(p.values)
            config[p.name] = values[0] if pick == "low" else values[-1]
    return config


# ---- audited import of generated modules ----------------------------------------

# Runs in a fresh interpreter. stdin: {"preload": [module, ...], "cases": [[module_path,
# [kwargs, ...]], ...]}. Imports torch and the standard modules the generated code uses
# (`preload`, see baseline_imports) *before* installing the hook, then imports each module from its file under a unique name
# and calls plan(**kwargs) for each configuration. Prints one JSON line per module: the sensitive events seen
# during the import and during plan(), and the outcome of each.
AUDIT_SCRIPT = textwrap.dedent(r'''
    import __future__, dataclasses, importlib, importlib.util, itertools, json, logging, math, os, sys, typing
    import torch

    job = json.loads(sys.stdin.read())
    for name in job["preload"]:  # the modules the generated code imports (checked separately)
        importlib.import_module(name)
    cases = job["cases"]
    WATCH = ("exec", "compile", "import", "open", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
             "os.fork", "os.forkpty", "os.kill", "os.remove", "os.rename", "os.rmdir", "os.mkdir",
             "os.chmod", "os.putenv", "os.unsetenv", "os.startfile", "shutil.", "subprocess.Popen",
             "socket.", "urllib.", "http.", "ctypes.", "pty.spawn", "builtins.input", "webbrowser.open",
             "code.__new__", "function.__new__", "marshal.load", "pickle.find_class", "sys.settrace",
             "sys.setprofile", "cpython.run_", "sqlite3.", "tempfile.")
    state = {"events": None, "busy": False}

    def hook(event, args):
        if state["events"] is None or state["busy"] or not event.startswith(WATCH):
            return
        state["busy"] = True
        try:
            frame = sys._getframe(1)
            caller = frame.f_code.co_filename if frame is not None else "?"
            detail = []
            for a in args[:2]:
                if hasattr(a, "co_filename"):
                    detail.append("code:" + a.co_filename)
                else:
                    detail.append(repr(a)[:200])
            state["events"].append([event, caller, detail])
        finally:
            state["busy"] = False

    sys.addaudithook(hook)
    for i, (path, kwargs) in enumerate(cases):
        record = {"path": path}
        state["events"] = []
        try:
            folder = os.path.dirname(path)
            pkg = f"_audited_{i}"
            spec = importlib.util.spec_from_file_location(pkg, os.path.join(folder, "__init__.py"),
                                                          submodule_search_locations=[folder])
            package = importlib.util.module_from_spec(spec)
            sys.modules[pkg] = package
            spec.loader.exec_module(package)
            # the shared runtime is layoutc's own code, not the contract's: load it first and
            # audit only what importing the contract's module does
            runtime = os.path.join(folder, "_runtime")
            for sub in sorted(os.path.relpath(os.path.join(d, f), runtime)[:-3].replace(os.sep, ".")
                              for d, _, files in os.walk(runtime) for f in files
                              if f.endswith(".py") and "__pycache__" not in d):
                importlib.import_module(f"{pkg}._runtime.{sub.removesuffix('.__init__')}"
                                        if sub != "__init__" else f"{pkg}._runtime")
            state["events"] = []
            module = importlib.import_module(f"{pkg}.{os.path.basename(path)[:-3]}")
            record["import"] = "ok"
        except BaseException as exc:
            record["import"] = f"{type(exc).__name__}: {exc}"
            module = None
        record["import_events"] = state["events"]
        state["events"] = []
        record["plan"] = []
        for config in (kwargs if module is not None else []):
            try:
                result = module.plan(**config)
                record["plan"].append("ok" if type(result).__name__ == "Plan" else f"returned {type(result).__name__}")
            except BaseException as exc:
                kind = type(exc).__name__
                record["plan"].append("refused" if kind == "LayoutContractError" else f"{kind}: {exc}")
        record["plan_events"] = state["events"]
        state["events"] = None
        print(json.dumps(record), flush=True)
''')


def unexpected_events(record: dict[str, Any]) -> list[Any]:
    """Events of one audited import that are neither the module loading itself nor dataclasses.

    Loading a module legitimately opens/compiles/execs its own file (and its
    __pycache__), and `@dataclass` compiles and execs its generated __init__.
    Everything else (another import, another file, any process or network
    event) is reported. plan() must raise no watched event at all.
    """
    path = record["path"]
    folder = os.path.dirname(path)
    bad = []
    for event, caller, detail in record["import_events"]:
        from_dataclasses = caller.endswith(os.sep + "dataclasses.py")
        if from_dataclasses and (
                (event == "compile" and detail and detail[0].lstrip("b").strip("'\"").startswith("def __create_fn__("))
                or (event == "exec" and detail == ["code:<string>"])):
            continue  # @dataclass builds __init__/__repr__/... from the (validated) field names
        if event in ("exec", "compile") and any(path in d for d in detail):
            continue  # the module's own code object
        if event == "open" and detail and (detail[0].strip("'\"").startswith(folder)):
            continue
        bad.append([event, caller, detail])
    return bad + [["during plan()", *e] for e in record["plan_events"]]


def module_imports(source: str) -> set[str]:
    """Top-level modules imported at module level (not inside functions) by `source`."""
    import dis
    code = compile(source, "<generated>", "exec")
    return {ins.argval.split(".")[0] for ins in dis.get_instructions(code) if ins.opname == "IMPORT_NAME"}


_BASELINE: list[set[str]] = []


def baseline_imports() -> set[str]:
    """What a generated module imports at load time for a harmless contract (the first
    shipped contract): the yardstick for hostile ones. Must be torch plus the standard
    library only."""
    if not _BASELINE:
        from layoutc.compiler.emit.render import render
        from layoutc.compiler.source import load
        contract, diags, _ = load(str(CONTRACTS[0]))
        assert contract is not None, diags
        names = module_imports(render(contract, f"contracts/{CONTRACTS[0].name}", ()))
        # `_runtime` is the package's own runtime (`from ._runtime import ...`), whose modules
        # import torch and the standard library only (tests/runtime/test_runtime.py checks them)
        foreign = {n for n in names if n not in sys.stdlib_module_names and n not in ("torch", "_runtime")}
        assert not foreign, f"a generated module imports non-standard modules: {sorted(foreign)}"
        _BASELINE.append(names)
    return _BASELINE[0]


def audit_import(cases: list[tuple[str, list[dict[str, Any]]]], timeout: float = 120) -> list[dict[str, Any]]:
    """Import every generated module in one audited child; one record per module."""
    job = {"preload": sorted(n for n in baseline_imports() if n != "_runtime"), "cases": cases}
    res = run_python(AUDIT_SCRIPT, [], timeout=timeout, stdin=json.dumps(job))
    records = [json.loads(line) for line in res.out.splitlines() if line.startswith("{")]
    if res.rc != 0 or len(records) != len(cases):
        raise AssertionError(f"audited import failed:\n{res.describe()}")
    return records


# ---- emit oracle ---------------------------------------------------------------

EXEC_LIMIT = 400  # generated modules executed per process (each costs a few ms)
_executed = [0]


def emit_oracle(contract: Any, execute: bool = True) -> None:
    """Render a checked contract: the source must compile as Python; executed (up to
    EXEC_LIMIT times per process), plan() at the lowest and highest in-domain values
    must return a Plan or raise LayoutContractError, and agree with evaluate.eval_lets.
    """
    import types

    from layoutc.compiler.emit.render import render
    from layoutc.compiler.evaluate import EvalError, eval_lets

    source = render(contract, "fuzz/fuzz.moe", ())
    code = compile(source, f"<generated {contract.name}>", "exec")
    if not execute or _executed[0] >= EXEC_LIMIT:
        return
    _executed[0] += 1
    # a member of the installed layoutc_generated package, so `from ._runtime import ...` resolves
    name = f"layoutc_generated._fuzz_generated_{_executed[0]}"
    module = types.ModuleType(name)
    module.__package__ = "layoutc_generated"
    sys.modules[name] = module  # @dataclass looks its module up
    try:
        exec(code, module.__dict__)
        for pick in ("low", "high"):
            config = config_for(contract, pick)
            try:
                plan = module.plan(**config)
            except module.LayoutContractError:
                continue
            try:
                expected = eval_lets(contract, config)
            except EvalError:
                continue
            for let in contract.lets:
                got = getattr(plan, let.name)
                assert got == expected[let.name], (f"plan().{let.name} = {got!r} but evaluate gives "
                                                   f"{expected[let.name]!r} at {config}")
            _pad_roundtrip(module, contract, plan)
    finally:
        sys.modules.pop(name, None)


def _pad_roundtrip(module: Any, contract: Any, plan: Any) -> None:
    """pad_T then unpad_T of a small tensor returns it (or raises LayoutContractError)."""
    import math

    import torch

    from layoutc.compiler import ir

    if not getattr(plan, "supported", True):
        return  # every tensor helper refuses an unsupported plan (policy fallback)
    for t in contract.tensors:
        logical, padded = getattr(module, f"{t.name}_shapes")(plan)
        if math.prod(logical) > 1 << 14 or math.prod(padded) > 1 << 16:
            continue
        name = getattr(plan, t.storage.param) if isinstance(t.storage, ir.ParamStorage) else t.storage.dtype
        dtype = getattr(torch, name)
        x = (torch.arange(math.prod(logical)) % 7).reshape(logical).to(dtype)
        try:
            y = getattr(module, f"pad_{t.name}")(x, plan)
        except module.LayoutContractError:
            continue
        assert tuple(y.shape) == tuple(padded), f"pad_{t.name}: shape {tuple(y.shape)} != {padded}"
        back = getattr(module, f"unpad_{t.name}")(y, plan)
        assert torch.equal(back, x), f"unpad_{t.name}(pad_{t.name}(x)) != x"
