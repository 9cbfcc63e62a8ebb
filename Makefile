# The README's two commands. Each installs what this machine lacks first (scripts/setup says what
# and asks; YES=1 or CI=1 installs without asking).
#   make demo    the offline round trip against the embedded reference server (ARGS=--typed: the typed API)
#   make test    every test, the documentation build and the fuzz targets, exactly as CI runs them
#   make setup   only the installs that `make test` needs
.PHONY: demo test setup

demo:
	@scripts/demo $(ARGS)

test:
	@scripts/test

setup:
	@scripts/setup test
