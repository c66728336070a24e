"""The Pulsarcast sidecar daemon that runs beside a Kubo node."""
