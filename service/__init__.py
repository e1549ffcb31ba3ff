"""The HTTP search service (`odqa serve`): the workspace's published indexes behind FastAPI.

Beside flows/ on the top floor, and importing no Prefect: answering a request never starts a
Prefect server. `service.app.create_app` builds the app, `service.releases` holds the loaded
releases and swaps them, `service.run.serve` runs it with uvicorn.
"""
