"""The cross-layer attention conformance suite: one paged-KV-cache builder
(:mod:`conformance.kvcache`), one fp64 reference with its tolerance model
(:mod:`conformance.reference`) and one case matrix with the batch builders
(:mod:`conformance.cases`), run against every attention implementation by ``test_ops.py``
(the rvv-ops ops; ``nox -s ops-tests``), ``test_attention.py`` (rvv-attention's kernel and
fallback paths; ``nox -s attention-tests``) and ``test_sglang_backend.py`` (SGLang's ``rvv``
backend on hand-built ForwardBatches; ``nox -s sglang-tests``). tools/ops_riscv.py also runs
the first two under QEMU, with the quick subset of the cases (see :mod:`conformance.cases`).
rvv-kernels' torch-free C++ attention tests (``nox -s kernels-tests``) read the case files
:mod:`conformance.kernel_cases` writes (inputs, expected outputs and tolerances).
:mod:`conformance.fixtures` holds the fixtures these files share with the packages' tests
(the active rvv-ops variant, rvv-attention's selection state)."""
