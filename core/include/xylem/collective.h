// Collectives that a backend runs on its own device buffers (plugin ABI 1.6, optional): a
// data-parallel run (`mpirun -np N xylem train`) sums its gradient buckets with them where every
// rank's backend has them (the CUDA plugin, with NCCL), and through host memory otherwise. The
// core carries bytes only: the ranks exchange the communicator id themselves (train/, over MPI).
#pragma once

#include <cstdint>
#include <vector>

#include "xylem/backend.h"
#include "xylem/tensor.h"

namespace xylem {

// True when the plugin's table has all four ABI 1.6 collective members.
bool has_device_collectives(const Backend& backend);

// A new communicator id (on one rank; every rank's device_comm_init takes it).
std::vector<uint8_t> device_comm_id(Backend& backend);
// Joins the backend's communicator as `rank` of `size` for buffers of `dev`; returns once every
// rank has joined. Errors name the backend and the plugin's reason.
void device_comm_init(Device& dev, const std::vector<uint8_t>& id, int rank, int size);
// Enqueues on dev's stream the in-place sum over the ranks of scale_r * t_r (f32). Work deferred
// by a step fusion is launched first, so the sum sees every gradient written before it.
void device_allreduce_sum(Device& dev, Tensor& t, float scale);
// Leaves the communicator (no-op without one).
void device_comm_destroy(Backend& backend) noexcept;

}  // namespace xylem
