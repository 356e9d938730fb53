// sluice._sluice: the C++ library as Python sees it (pybind11). The Python package (python/sluice)
// re-exports these classes and adds conveniences (torch tensors out, CUDA tensors staged through
// host memory until the device path lands, role configuration files); see its __init__.pyi.
//
// Every blocking call releases the GIL and ends within its timeout; C++ errors become
// sluice.Error (code: the status code's name), timeouts sluice.TimeoutError, a target that does
// not match a version's manifest sluice.MismatchError.
//
// This file holds the errors' translation and the module's table of sections; each section's
// classes and bindings are in a file of its own (bindings.hpp).
#include <pybind11/pybind11.h>

#include <exception>
#include <string>

#include "bindings.hpp"
#include "common.hpp"
#include "core/cuda_device.hpp"
#include "core/log.hpp"

namespace sluice::python {

namespace {

// The exception classes, made once by PYBIND11_MODULE.
PyObject* g_error = nullptr;
PyObject* g_timeout = nullptr;
PyObject* g_mismatch = nullptr;

void raise_status(const core::Status& s) {
  PyObject* cls = s.code() == core::Code::kTimeout ? g_timeout : g_error;
  py::object e = py::reinterpret_borrow<py::object>(cls)(s.to_string());
  std::string code(core::code_name(s.code()));  // "not found" -> "not_found"
  for (char& c : code)
    if (c == ' ') c = '_';
  e.attr("code") = code;
  PyErr_SetObject(cls, e.ptr());
}

}  // namespace

PYBIND11_MODULE(_sluice, m) {
  m.doc() = "sluice's C++ library (see the sluice package for the documented API)";
  g_error = PyErr_NewException("sluice.Error", PyExc_RuntimeError, nullptr);
  {
    py::tuple bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_TimeoutError));
    g_timeout = PyErr_NewException("sluice.TimeoutError", bases.ptr(), nullptr);
    py::tuple mb = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
    g_mismatch = PyErr_NewException("sluice.MismatchError", mb.ptr(), nullptr);
  }
  m.attr("Error") = py::handle(g_error);
  m.attr("TimeoutError") = py::handle(g_timeout);
  m.attr("MismatchError") = py::handle(g_mismatch);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      raise_status(e.status);
    } catch (const MismatchError& e) {
      py::object ex = py::reinterpret_borrow<py::object>(g_mismatch)(e.message);
      ex.attr("code") = "mismatch";
      PyErr_SetObject(g_mismatch, ex.ptr());
    }
  });

  m.def(
      "cuda_devices", [] { return core::cuda_devices().count; },
      "CUDA devices this build can copy to and from (0: none, or built without CUDA)");
  m.def(
      "set_log_level",
      [](const std::string& level) { core::log::set_level(value(core::log::parse_level(level))); },
      py::arg("level"), "trace, debug, info, warn, error or off (stderr)");

  bind_publisher(m);
  bind_reader(m);
  bind_manager_clients(m);
  bind_task(m);
}

}  // namespace sluice::python
