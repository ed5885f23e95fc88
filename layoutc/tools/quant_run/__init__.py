"""`layoutc run` on quantized checkpoints: GPTQ / AWQ int4 on torch's int4pack kernel from the
checkpoint's own codes (codes.py, rank.py); every other method reference-only, each rank's
padded tensors through its contract's generated loaders and decode (padded.py), dispatched by
runner.py. `layoutc.tools.run` hands a checkpoint with a `quantization_config` here."""
