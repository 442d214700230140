"""What the workers' forkserver imports besides torch and the worker module, before it forks any worker.

torch._dynamo: a worker's first optimizer step imports it (about 1 s and 100 MB), once here for every
worker instead. It imports triton only to ask whether triton is installed (triton compiles kernels for
``torch.compile``, which no worker uses); refused here, triton's library and modules (about 75 MB
resident) stay out of the server and of every worker forked from it, and torch answers that triton is
absent.
"""

from __future__ import annotations

from core.host.machine import imports_refused

with imports_refused("triton"):
    import torch._dynamo  # noqa: F401
