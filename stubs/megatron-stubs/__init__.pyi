# Part of spmd-mypy's partial stub package for megatron-core (docs/megatron.md).  `megatron` is a
# namespace package in megatron-core (no __init__.py): this empty stub stands for it, so that
# mypy does not stop with "megatron: error: Cannot read file" when megatron-core is not installed.
