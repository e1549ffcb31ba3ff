"""Wikipedia category graph -> domain labels (DESIRE-ME section 4.1): SQL dump reader, graph
input from the XML ingest or the SQL dumps, the labeller and the coverage report."""
