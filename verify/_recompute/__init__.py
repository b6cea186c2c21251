"""The verifier's recomputation of the science, stage by stage (see :mod:`verify._science`).

One module per stage the writer runs: ``archive`` (what is read), ``rescore``, ``dataset``,
``model``, ``descriptive``, ``hypotheses`` (through :mod:`verify._statistics`), ``exploratory``,
``agreement``, ``sensitivity``, ``reviews``, ``recompute`` (their order), ``reanalysis`` (the
check) and ``posthoc``; ``results``, ``compare`` and ``pairs`` are shared by them.
"""
