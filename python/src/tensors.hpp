// Tensors handed over from Python without a copy: through DLPack (torch, and any object with
// __dlpack__) or through the buffer protocol (numpy, bytes, memoryview). A TensorRef names the
// memory; it stays valid while the Python object it came from is alive (the caller keeps it).
//
// dtypes are spelled as in safetensors (and in the weight store's manifests): F32, BF16, F16,
// F64, I8, I16, I32, I64, U8, BOOL.
//
// Thread safety: the functions that take Python objects need the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice::python {

namespace py = pybind11;

struct TensorRef {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::uint8_t* data = nullptr;
  std::uint64_t bytes = 0;
  bool cuda = false;  // device memory (DLPack kDLCUDA); else host memory
  int device = 0;     // the CUDA device when `cuda`
  bool writable = true;
  // Keeps the exporter's memory alive until the TensorRef goes (a DLPack capsule's deleter, a
  // buffer view's release).
  std::shared_ptr<void> keep;
};

// One tensor: a DLPack exporter (an object with __dlpack__, or a "dltensor" capsule) or a buffer.
// Raises ValueError for memory that is not contiguous in C order, a dtype safetensors does not
// name, or an object that is neither.
TensorRef tensor_ref(const std::string& name, const py::handle& obj);

// A mapping name -> tensor (a state_dict) or an iterable of (name, tensor) pairs, in the order
// given. Raises ValueError for a repeated name.
std::vector<TensorRef> tensor_refs(const py::handle& tensors);

// Bytes per element of a safetensors dtype; 0 for one it does not know.
std::uint64_t dtype_bytes(const std::string& dtype);

}  // namespace sluice::python
