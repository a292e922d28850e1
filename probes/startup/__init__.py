"""What SGLang resolves at start, before any backend is built: the model, the page size, the
attention backend it runs (forced by the model, given, or its default) and the speculative
parameters it picks. Shared by the per-phase verdicts and the sync census, so both audit the
same backend."""
