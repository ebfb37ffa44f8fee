"""cuda.core (NVIDIA's Pythonic layer): a Buffer kept, one closed, and one from a memory
resource. Lines marked `# KEPT`, … are read by tests/python/test_clients.py."""

from cuda.core import Device

device = Device()
device.set_current()
stream = device.create_stream()

KEPT = device.allocate(4 << 20, stream=stream)  # KEPT
closed = device.allocate(2 << 20, stream=stream)  # CLOSED
closed.close(stream)
resource = device.memory_resource
FROM_RESOURCE = [resource.allocate(1 << 20, stream=stream)]  # RESOURCE
stream.sync()
print("done", type(resource).__name__, flush=True)
