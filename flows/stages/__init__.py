"""One flow per stage, each the flow its `odqa` verb runs (and a pipeline stage calls)."""
