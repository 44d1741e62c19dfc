# The machine proof of the rules (issue 7): the rule soundness suite, a bounded fuzz run and the
# robustness runs, with figures; see docs/soundness.md.  Run from a source checkout.
PYTHON ?= python
export PYTHONPATH := $(CURDIR):$(CURDIR)/runtime:$(CURDIR)/stubs$(if $(PYTHONPATH),:$(PYTHONPATH))

.PHONY: soundness soundness-quick
soundness:
	$(PYTHON) -m soundness $(ARGS)

soundness-quick:
	$(PYTHON) -m soundness --quick $(ARGS)
