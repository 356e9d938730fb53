// The sections of sluice._sluice, each registered by its own file; PYBIND11_MODULE (module.cpp)
// calls them in this order, which is the order of the module's contents (a later section's
// defaults may name an earlier section's types).
#pragma once

#include <pybind11/pybind11.h>

namespace sluice::python {

// Publisher (publisher.cpp).
void bind_publisher(pybind11::module_& m);
// TensorInfo and Reader (reader.cpp).
void bind_reader(pybind11::module_& m);
// SequenceState, Trajectory, to_trajectory, Work, Generator, Batch and TrainerClient
// (manager_clients.cpp).
void bind_manager_clients(pybind11::module_& m);
// ArithmeticTask (task.cpp).
void bind_task(pybind11::module_& m);

}  // namespace sluice::python
