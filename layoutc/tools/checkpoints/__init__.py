"""Reading real MoE checkpoints: declared formats (`formats`, torch-free) and safetensors access (`reader`)."""
