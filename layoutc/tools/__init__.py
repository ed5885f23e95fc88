"""The tools built on the compiler and the runtime.

- `audit` and `hfconfig`: "which kernels take the fast path for my model?" from config.json
  (no torch, no solver).
- `explain`: draws each padded tensor of a contract at one configuration (no torch).
- `run`: `layoutc run MODEL_DIR`, a real checkpoint per rank on the real kernel (torch).
- `tp`: the tensor-parallel runner over torch.distributed (torch).

The checkpoint formats and readers are `layoutc.tools.checkpoints`; the vLLM plugin is
`layoutc.tools.vllm_plugin`. `contract_module` imports a generated module and checks its
`LAYOUT` (layoutc/runtime/interface.py ModuleLayout), where the tools look its tensors up by
role (`weight w13`, `bias w2`, ...), never by name.
"""
