#include "tensors.hpp"

#include <set>
#include <stdexcept>

#include "core/cuda_device.hpp"

namespace sluice::python {

namespace {

// The DLPack ABI (dlpack.h, version 0.x as torch 1.13 and numpy 1.24 export it), declared here
// rather than taken from a header Debian does not ship.
struct DLDevice {
  std::int32_t device_type;
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; null: compact C order
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
constexpr std::int32_t kDLCPU = 1;
constexpr std::int32_t kDLCUDA = 2;
constexpr std::int32_t kDLCUDAHost = 3;
// The stream a consumer names to __dlpack__ for CUDA's legacy default stream (the Python array
// API standard's value; torch maps it to its default stream).
constexpr int kLegacyDefaultStream = 1;
constexpr std::uint8_t kDLInt = 0;
constexpr std::uint8_t kDLUInt = 1;
constexpr std::uint8_t kDLFloat = 2;
constexpr std::uint8_t kDLBfloat = 4;
constexpr std::uint8_t kDLBool = 6;

std::string dl_dtype(const DLDataType& t, const std::string& name) {
  if (t.lanes != 1) throw py::value_error("tensor '" + name + "': vector dtypes are not supported");
  if (t.code == kDLFloat && t.bits == 32) return "F32";
  if (t.code == kDLFloat && t.bits == 16) return "F16";
  if (t.code == kDLFloat && t.bits == 64) return "F64";
  if (t.code == kDLBfloat && t.bits == 16) return "BF16";
  if (t.code == kDLInt && t.bits == 8) return "I8";
  if (t.code == kDLInt && t.bits == 16) return "I16";
  if (t.code == kDLInt && t.bits == 32) return "I32";
  if (t.code == kDLInt && t.bits == 64) return "I64";
  if (t.code == kDLUInt && t.bits == 8) return "U8";
  if ((t.code == kDLBool || t.code == kDLUInt) && t.bits == 8) return "BOOL";
  throw py::value_error("tensor '" + name + "': DLPack dtype code " + std::to_string(t.code) +
                        " of " + std::to_string(t.bits) + " bits has no safetensors name");
}

std::string buffer_dtype(const py::buffer_info& b, const std::string& name) {
  const std::string& f = b.format;
  char c = f.empty() ? '?' : f.back();  // drops a byte-order prefix ('<', '=', '@')
  if (f.size() > 1 && f[0] != '<' && f[0] != '=' && f[0] != '@')
    throw py::value_error("tensor '" + name + "': buffer format '" + f + "' is not supported");
  switch (c) {
    case 'f':
      return "F32";
    case 'd':
      return "F64";
    case 'e':
      return "F16";
    case 'b':
      return "I8";
    case 'h':
      return "I16";
    case 'B':
      return "U8";
    case '?':
      return "BOOL";
    case 'i':
      return b.itemsize == 4 ? "I32" : "I64";
    case 'l':
    case 'q':
      return b.itemsize == 8 ? "I64" : "I32";
    default:
      break;
  }
  throw py::value_error("tensor '" + name + "': buffer format '" + f +
                        "' has no safetensors dtype (bfloat16 numpy arrays: pass a torch tensor)");
}

TensorRef from_capsule(const std::string& name, py::capsule cap) {
  if (std::string(cap.name() ? cap.name() : "") != "dltensor")
    throw py::value_error("tensor '" + name + "': a DLPack capsule already consumed");
  auto* m = static_cast<DLManagedTensor*>(cap.get_pointer());
  // Consumed: the capsule no longer owns the tensor; `keep` calls its deleter.
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  std::shared_ptr<void> keep(m, [](void* p) {
    auto* mt = static_cast<DLManagedTensor*>(p);
    py::gil_scoped_acquire gil;  // numpy's deleter drops a Python reference
    if (mt->deleter) mt->deleter(mt);
  });
  const DLTensor& t = m->dl_tensor;
  TensorRef r;
  r.name = name;
  r.dtype = dl_dtype(t.dtype, name);
  if (t.device.device_type == kDLCUDA) {
    r.cuda = true;
    r.device = t.device.device_id;
  } else if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
    throw py::value_error("tensor '" + name + "': DLPack device type " +
                          std::to_string(t.device.device_type) + " (only CPU and CUDA)");
  }
  std::uint64_t elems = 1;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) throw py::value_error("tensor '" + name + "': negative dimension");
    r.shape.push_back(static_cast<std::uint64_t>(t.shape[i]));
    elems *= static_cast<std::uint64_t>(t.shape[i]);
  }
  if (t.strides != nullptr && elems > 1) {
    std::int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expect)
        throw py::value_error("tensor '" + name +
                              "' is not contiguous: call .contiguous() before passing it");
      expect *= t.shape[i];
    }
  }
  r.bytes = elems * (t.dtype.bits / 8u);
  r.data = static_cast<std::uint8_t*>(t.data) + t.byte_offset;
  r.keep = std::move(keep);
  return r;
}

TensorRef from_buffer(const std::string& name, const py::handle& obj) {
  auto view = std::make_shared<Py_buffer>();
  if (PyObject_GetBuffer(obj.ptr(), view.get(),
                         PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) != 0) {
    PyErr_Clear();
    // Read-only memory (bytes, a read-only array) is fine to publish from.
    if (PyObject_GetBuffer(obj.ptr(), view.get(), PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
      PyErr_Clear();
      throw py::value_error("tensor '" + name +
                            "': neither DLPack nor a C-contiguous buffer (got " +
                            std::string(py::str(obj.get_type())) + ")");
    }
  }
  std::shared_ptr<Py_buffer> keep(view.get(), [view](Py_buffer* b) {
    py::gil_scoped_acquire gil;
    PyBuffer_Release(b);
  });
  py::buffer_info info(view.get(), false);
  TensorRef r;
  r.name = name;
  r.dtype = buffer_dtype(info, name);
  for (auto d : info.shape)
    r.shape.push_back(static_cast<std::uint64_t>(d));
  r.bytes = static_cast<std::uint64_t>(info.size * info.itemsize);
  r.data = static_cast<std::uint8_t*>(info.ptr);
  r.writable = !info.readonly;
  r.keep = std::static_pointer_cast<void>(keep);
  return r;
}

}  // namespace

std::uint64_t dtype_bytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL") return 1;
  return 0;
}

TensorRef tensor_ref(const std::string& name, const py::handle& obj) {
  if (py::isinstance<py::capsule>(obj))
    return from_capsule(name, py::reinterpret_borrow<py::capsule>(obj));
  if (py::hasattr(obj, "__dlpack__")) {
    // torch refuses to export a tensor that requires grad; its detached view shares the memory.
    py::object src = py::reinterpret_borrow<py::object>(obj);
    if (py::hasattr(src, "detach") && py::hasattr(src, "requires_grad") &&
        src.attr("requires_grad").cast<bool>())
      src = src.attr("detach")();
    // The DLPack protocol: a consumer that reads device memory on a stream names it, and the
    // producer makes that stream wait for its own pending work (torch's current stream, where
    // optimizer.step() may still be writing). We name the legacy default stream and wait for
    // it on the host before anything reads the bytes: our copies run on streams of their own,
    // so this is the one point where the order is set, whatever stream the producer used.
    // (Only a GPU run can show it: scripts/gpu_check.sh.)
    int device_type = kDLCPU;
    if (py::hasattr(src, "__dlpack_device__")) {
      py::tuple dev = src.attr("__dlpack_device__")();
      device_type = static_cast<int>(py::int_(dev[0]));
    }
    try {
      py::object cap = device_type == kDLCUDA
                           ? src.attr("__dlpack__")(py::arg("stream") = kLegacyDefaultStream)
                           : src.attr("__dlpack__")();
      TensorRef r = from_capsule(name, cap.cast<py::capsule>());
      if (r.cuda) {
        core::Status waited;
        {
          py::gil_scoped_release nogil;
          waited = core::cuda_wait_legacy_stream(r.device);
        }
        if (!waited.is_ok()) {
          throw std::runtime_error("tensor '" + name + "': " + waited.to_string());
        }
      }
      return r;
    } catch (py::error_already_set& e) {
      // numpy cannot export a read-only array through DLPack; its buffer serves.
      if (!PyObject_CheckBuffer(obj.ptr())) throw;
    }
  }
  return from_buffer(name, obj);
}

std::vector<TensorRef> tensor_refs(const py::handle& tensors) {
  std::vector<TensorRef> out;
  std::set<std::string> seen;
  auto add = [&](const py::handle& k, const py::handle& v) {
    std::string name = py::str(k);
    if (!seen.insert(name).second) throw py::value_error("tensor '" + name + "' given twice");
    out.push_back(tensor_ref(name, v));
  };
  if (py::isinstance<py::dict>(tensors) || py::hasattr(tensors, "items")) {
    for (auto item : tensors.attr("items")()) {
      auto pair = item.cast<py::tuple>();
      add(pair[0], pair[1]);
    }
    return out;
  }
  for (auto item : tensors) {
    auto pair = py::reinterpret_borrow<py::object>(item);
    if (!py::isinstance<py::tuple>(pair) || py::len(pair) != 2)
      throw py::value_error("tensors: expected a mapping or an iterable of (name, tensor) pairs");
    add(pair.cast<py::tuple>()[0], pair.cast<py::tuple>()[1]);
  }
  return out;
}

}  // namespace sluice::python
