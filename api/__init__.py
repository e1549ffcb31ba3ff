"""The public API's implementation, re-exported by the `odqa` package (`import odqa`).

It sits on the top floor beside flows/ and service/: it may use every layer below, and keeps
searching, encoding and table reading free of Prefect. `odqa/` itself is only the facade, so the
names a user imports stay few and stable while these modules may move."""
