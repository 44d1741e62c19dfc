"""A minimal fake of megatron-core for the check mode's tests (rt_megatron_mappings.py)."""
