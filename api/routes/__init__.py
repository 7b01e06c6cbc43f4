"""One router per resource; :mod:`pipeplan.api.main` includes them all."""
