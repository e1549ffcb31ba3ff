"""One torchrun rank of a multi-GPU `train` flow run: `models.job` with this process's ``odqa.*``
records (rank 0's training progress) sent to the parent flow run's logs.

`models/` must not import Prefect, so the rank entry point lives here; the flow starts it as
``torchrun ... -m odqa.flows.stages.train_worker JOB.json`` with ``flows.plumbing.runtime.run_log_env()`` set.
"""

from __future__ import annotations

import sys

from ...models.job import main
from ..plumbing.runtime import adopt_flow_run_from_env

if __name__ == "__main__":
    adopt_flow_run_from_env()
    sys.exit(main())
