// The ABI 1.6 collective members, wrapped: checked table, errors naming the backend.
#include "xylem/collective.h"

#include "fusion_internal.h"
#include "xylem/error.h"

namespace xylem {

bool has_device_collectives(const Backend& backend) {
    const xylem_plugin* t = &backend.api();
    return XYLEM_TABLE_HAS(t, comm_unique_id) && XYLEM_TABLE_HAS(t, comm_init) && XYLEM_TABLE_HAS(t, comm_allreduce_sum) &&
           XYLEM_TABLE_HAS(t, comm_destroy);
}

namespace {
void require(const Backend& backend) {
    if (!has_device_collectives(backend))
        throw Error("backend '" + backend.name() + "' has no device collectives (plugin ABI 1.6 comm_* members)");
}
}  // namespace

std::vector<uint8_t> device_comm_id(Backend& backend) {
    require(backend);
    std::vector<uint8_t> id(XYLEM_COMM_ID_MAX);
    uint32_t size = 0;
    backend.check(backend.api().comm_unique_id(backend.framework(), id.data(), XYLEM_COMM_ID_MAX, &size),
                  "communicator id");
    if (size == 0 || size > XYLEM_COMM_ID_MAX)
        throw Error(backend.name() + ": communicator id: the plugin reported " + std::to_string(size) +
                    " bytes (1 to " + std::to_string(XYLEM_COMM_ID_MAX) + " expected)");
    id.resize(size);
    return id;
}

void device_comm_init(Device& dev, const std::vector<uint8_t>& id, int rank, int size) {
    Backend& b = dev.backend();
    require(b);
    if (size < 1 || rank < 0 || rank >= size)
        throw Error("device communicator: rank " + std::to_string(rank) + " of " + std::to_string(size) + " is invalid");
    b.check(b.api().comm_init(b.framework(), dev.index(), id.data(), static_cast<uint32_t>(id.size()), rank, size),
            "joining the device communicator");
}

void device_allreduce_sum(Device& dev, Tensor& t, float scale) {
    Backend& b = dev.backend();
    require(b);
    if (t.dtype() != DType::F32) throw Error(b.name() + ": device allreduce: only f32 tensors are summed");
    if (dev.capture_log())
        throw Error(dev.name() + ": a device allreduce cannot be recorded in a captured step");
    if (fusion::StepState* f = dev.fusion_state()) fusion::flush(*f);  // the gradients' writers run first
    const xylem_tensor_arg arg = t.read_write(dev);
    b.check(b.api().comm_allreduce_sum(b.framework(), dev.stream(), &arg, scale), "device allreduce");
}

void device_comm_destroy(Backend& backend) noexcept {
    if (!has_device_collectives(backend)) return;
    try {
        backend.api().comm_destroy(backend.framework());
    } catch (...) {  // no framework: there is no communicator to leave
    }
}

}  // namespace xylem
