"""Stands in for the real ``rfc3987_syntax`` in the test Ray cluster's processes only, and raises ImportError.

Why this file exists: every Python process of a Ray node (its dashboard and runtime-env agents, its workers) imports
ray, which imports jsonschema, which imports ``rfc3987_syntax`` when it is installed (the notebook extras pull in
``jsonschema[format-nongpl]``). That package builds an Earley grammar at import: about 3 s of CPU per process, 80 %
of ``import ray`` here. Ray 2.60's raylet gives its dashboard agent a fixed 15 s to write its port file and aborts
otherwise, so on a busy 2-core machine the node never registers ("The current node timed out during startup").
jsonschema treats this ImportError as the package's absence and leaves out only its "iri" format checks, which Ray
does not use. ``tests/test_autotune_ray.py``'s ``start_cluster`` puts this folder first on the cluster's path.
"""

raise ImportError("rfc3987_syntax is left out of the test Ray cluster's processes (tests/ray_site: a 3 s import)")
