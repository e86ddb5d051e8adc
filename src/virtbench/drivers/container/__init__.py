"""The container driver: containers from the guest image through a container engine (podman,
docker), its lifecycle checks and the engine itself."""
