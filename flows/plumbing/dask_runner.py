"""prefect-dask's task runner, sending the tasks to the cluster at the address it was given.

prefect-dask 0.3.7's `DaskTaskRunner` asks `distributed.get_client()` first and, when the
process already holds a Dask client (a notebook's `Client()`, a benchmark's, a flow run inside
a Dask task), maps the tasks over that client's cluster whatever address it was given: a flow
with `--dask-address B` started from such a process sent its shards to cluster A. Here a given
address always wins; without one the runner behaves as prefect-dask's (reuse a client the
process holds, else start a local cluster).

Its own module, imported only when a Dask runner is built: importing prefect-dask pulls in
`distributed` (about a second), which verbs on the default runner must not pay for.
"""

from __future__ import annotations

from prefect_dask import DaskTaskRunner
from prefect_dask.client import PrefectDaskClient


class AddressedDaskTaskRunner(DaskTaskRunner):
    """`DaskTaskRunner` whose ``address``, when given, is the cluster its tasks run on."""

    @property
    def client(self) -> PrefectDaskClient:
        """The runner's Dask client, connected on first use: to ``address`` when one was given
        (never to a client the process happens to hold), else as prefect-dask decides."""
        if self._client is None and self.address:
            self.logger.info(f"Connecting to the Dask cluster at {self.address}")
            self._connect_to = self.address
            self._client = self._exit_stack.enter_context(PrefectDaskClient(self.address, **self.client_kwargs))
        return super().client
