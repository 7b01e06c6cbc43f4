"""The pipeplan planning service over HTTP (FastAPI); see issue #6."""
