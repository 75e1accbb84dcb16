"""What a reviewer reads: the operator-to-kernel mapping sheet (``report.sheet``) and the one
self-contained offline HTML report of a plan with its validation, serve and sweep results."""
