"""Static census of sync-prone calls in SGLang's attention metadata builders (AST only).

Stages, one module each: `sites` (what a site, its verdict and a census are), `paths` (which
forward modes reach a statement, and what enclosing branches already decided), `guards` (the
configuration tests on the way), `kinds` (device or host), `scan` (finding the sites in one
builder), `reach` (which builders a module has and what reaches
each), `count` (the census of a release, cached, and of one file: its entry points); the
release facts they read: `batch_fields` (ForwardBatch fields a target-verify step leaves None),
`wrapped` (the modes a wrapper withholds from the backend it holds), `objects`, `draft_steps`,
`fast_paths`.

Scopes (`scopes`): the metadata builders below (the default), or the attention forward
(`forward_extend` / `forward_decode` and what they call: once per layer, on eager passes only),
counted apart.

Builders: the methods named `init_forward_metadata*` (and `_build_*meta*`, `_make_*meta*`,
`_prepare_*meta*`, `_attach_*meta*`, `_compute_*meta*`) of every class under
`sglang/srt/layers/attention/**`, plus the helpers they call, transitively (`self.m(...)` on the
same class or a base class in the same module, and module-level functions of the same module).

Each sync-prone call in a builder gets one verdict:
- `syncs`: a device tensor is read from the host on some per-step path (2 syncs for
  `repeat_interleave` without `output_size` and for `bincount`, 1 otherwise);
- `host-mirror`: the value read is a host mirror (`*_cpu` names, or a host value at every
  caller in the file) - no sync;
- `capture-only`: reached only while a CUDA graph is captured (capture flags such as
  `in_capture` / `is_capture_mode`, `*capture*` entry points), not per step;
- `once`: in the fill of a cache the backend keeps (`if self._x is None: ... self._x = ...`,
  census.memo): the first pass pays it, not every step;
- `unreachable`: in a branch that cannot run (an `else` that contradicts the branch around it,
  a helper no reachable call reaches);
- `cannot-tell`: the census cannot say whether the tensor lives on the device.

Paths: every statement carries the (forward mode, phase) pairs that can reach it. Forward-mode
predicates (`forward_mode.is_target_verify()`, `is_draft_extend_v2()`, `== ForwardMode.X`, a
local derived from the mode such as `_GraphBucket.of(forward_mode)`), capture flags, asserts and
early returns narrow them; a helper gets the union of its callers' pairs at the call sites, an
entry point what its name says (`*verify*`, `*draft_extend*`, `*decode*`, `*capture*`).
A parameter every caller in the file passes as `None` or as a host value is read as such; a
private method's parameter every caller binds to a host mirror of the batch
(`forward_batch.seq_lens_cpu`, on the replay path of `x if in_capture else ...`) is that
mirror in its guards (`mirror:seq_lens_cpu`, which the configuration decides).
A forward-mode test the census cannot read makes the site's path `cannot-tell`.

What it cannot tell (by construction): types are guessed from names, annotations, assignments in
the same function and well-known ForwardBatch fields (a value of unknown kind is `cannot-tell`,
and a test on one, `if t:`, is a site only where `t` is known to be on the device); calls into
modules outside the attention package are not followed; conditions on anything but the forward
mode and capture flags are taken to go both ways (paths are "may reach"). The executed harness
(probes.metadata_syncs.builder_harness) measures what it can run.
"""
