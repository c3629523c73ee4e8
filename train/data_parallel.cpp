// Data-parallel training: start-up agreement, gradient buckets and their reduction, sharded
// evaluation. See data_parallel.h.
#include "xylem/train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "xylem/collective.h"
#include "xylem/env.h"
#include "xylem/error.h"
#include "xylem/op_calls.h"

namespace xylem::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// PyTorch DDP's bucket sizes: a small first bucket, so the first sum starts early in backward, then
// larger ones (fewer calls). XYLEM_BUCKET_KB sets the larger size (and caps the first).
constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;
int64_t bucket_bytes() {
    return env::value_or(env::bucket_kb(), int64_t{25} << 10) * 1024;
}

// "host" forces the host path even where every rank's plugin could sum device buffers.
bool host_path_forced() {
    return env::value_or(env::dist_reduce(), std::string("auto")) == "host";
}

std::string mib(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, bytes >= 1024.0 * 1024 ? "%.2f MiB" : "%.1f KiB",
                  bytes >= 1024.0 * 1024 ? bytes / (1024.0 * 1024) : bytes / 1024.0);
    return buf;
}

// The model's parameters and buffers as names and shapes: what every rank must build alike.
uint64_t model_fingerprint(Net& model, uint64_t* count) {
    uint64_t h = fingerprint("model");
    *count = 0;
    for (Param* p : model.state()) {
        h = fingerprint(p->name + to_string(p->value.shape()) + ";", h);
        *count += static_cast<uint64_t>(p->value.numel());
    }
    return h;
}

}  // namespace

uint64_t fingerprint(const void* data, size_t bytes, uint64_t h) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

uint32_t device_for_rank(const Registry& registry, const BackendChoice& choice, int local_rank) {
    const PluginRecord* rec = registry.find(choice.backend->name());
    if (!rec) return choice.device;
    std::vector<uint32_t> alike;  // the devices of the chosen one's kind, from it on, then before it
    const uint32_t n = rec->probe.device_count, kind = rec->device_kind(choice.device);
    for (uint32_t k = 0; k < n; ++k) {
        const uint32_t d = (choice.device + k) % n;
        if (rec->device_kind(d) == kind) alike.push_back(d);
    }
    if (alike.empty()) return choice.device;
    return alike[static_cast<size_t>(local_rank) % alike.size()];
}

DataParallel::DataParallel(Collectives& ranks, Device& dev) : ranks_(ranks), dev_(dev) {}

DataParallel::~DataParallel() {
    if (comm_joined_) device_comm_destroy(dev_.backend());
}

void DataParallel::start(const Identity& id, Net& model, Solver& solver, int64_t batch_size) {
    // 1. Agreement: every rank sends what it loaded; every rank judges all of them the same way,
    //    so every rank raises the same error.
    uint64_t params = 0;
    const uint64_t model_hash = model_fingerprint(model, &params);
    const bool device_ok = has_device_collectives(dev_.backend()) && !host_path_forced();
    const std::vector<std::vector<uint64_t>> all =
        ranks_.gather_all({id.config, model_hash, params, id.data, id.position, device_ok ? 1u : 0u, fingerprint(id.backend)},
                          "comparing the ranks");
    std::string why;
    for (int r = 1; r < size() && why.empty(); ++r) {
        const std::vector<uint64_t>& mine = all[static_cast<size_t>(r)];
        const std::vector<uint64_t>& root = all[0];
        const std::string who = "rank " + std::to_string(r);
        char hashes[96];
        std::snprintf(hashes, sizeof hashes, "%016llx against %016llx", static_cast<unsigned long long>(mine[1]),
                      static_cast<unsigned long long>(root[1]));
        if (mine[6] != root[6])
            why = who + " runs on another backend than rank 0" + (rank() == 0 ? "'s " + id.backend : std::string()) +
                  ": every rank must run the same one (name it with --backend or XYLEM_BACKEND)";
        else if (mine[1] != root[1] || mine[2] != root[2])
            why = who + "'s model differs from rank 0's: " + std::to_string(mine[2]) + " against " +
                  std::to_string(root[2]) + " parameter and buffer values (names and shapes hash " + hashes + ")";
        else if (mine[0] != root[0])
            why = who + " loaded another config than rank 0 (its text or command-line overrides differ); every rank "
                        "must train the same config";
        else if (mine[3] != root[3])
            why = who + " loaded other data than rank 0 (the training, validation or test set sizes differ; data.dir "
                        "must hold the same files on every node)";
        else if (mine[4] != root[4])
            why = who + " stands elsewhere in the run than rank 0 (resumed from another checkpoint?)";
    }
    if (!why.empty()) throw RanksAgreeError("distributed run refused: " + why);
    if (batch_size < size())
        throw RanksAgreeError("train.batch_size " + std::to_string(batch_size) + " is smaller than the " +
                              std::to_string(size()) + " ranks: each rank needs at least one image of the global batch");
    device_path_ = std::all_of(all.begin(), all.end(), [](const std::vector<uint64_t>& v) { return v[5] == 1; });

    // 2. The device communicator, when every rank's plugin sums its own buffers.
    if (device_path_) {
        try {
            std::vector<uint8_t> id_bytes(XYLEM_COMM_ID_MAX + 4, 0);
            if (root()) {
                const std::vector<uint8_t> made = device_comm_id(dev_.backend());
                const uint32_t n = static_cast<uint32_t>(made.size());
                std::memcpy(id_bytes.data(), &n, 4);
                std::copy(made.begin(), made.end(), id_bytes.begin() + 4);
            }
            ranks_.broadcast(id_bytes.data(), id_bytes.size(), "sending the device communicator's id");
            uint32_t n = 0;
            std::memcpy(&n, id_bytes.data(), 4);
            device_comm_init(dev_, std::vector<uint8_t>(id_bytes.begin() + 4, id_bytes.begin() + 4 + n), rank(), size());
            comm_joined_ = true;
        } catch (const Error& e) {
            throw Error(std::string(e.what()) + " (XYLEM_DIST_REDUCE=host sums the gradients through host memory instead)");
        }
    }

    // 3. Rank 0's parameters, buffers and solver state everywhere (Caffe's initial broadcast): the
    //    same seed makes them equal already, unless a backend initialises differently or a resumed
    //    rank read another file; after this they are the same bits.
    std::vector<Param*> state = model.state();
    for (Param* p : state) copy_from_root(p->value, "copying rank 0's parameters");
    std::vector<Param*> trainable = model.params();
    for (Solver::StateSlot& slot : solver.state_slots(dev_, trainable))
        for (Tensor& t : *slot.tensors) copy_from_root(t, "copying rank 0's solver state");

    layout_buckets(model);
    model.set_backward_hook([this](size_t layer) { after_layer(layer); });
}

void DataParallel::copy_from_root(Tensor& t, const char* what) {
    t.download();
    void* host = t.dtype() == DType::I32 ? static_cast<void*>(t.host_read_write<int32_t>())
                                         : static_cast<void*>(t.host_read_write<float>());
    ranks_.broadcast(host, t.bytes(), what);
    t.upload(dev_);
}

// Buckets in reverse parameter order (the order backward writes them), each parameter's gradient
// re-pointed to its slice of its bucket's one buffer.
void DataParallel::layout_buckets(Net& model) {
    // The node after whose backward each gradient is complete (a shared weight: its last writer).
    std::map<const Param*, size_t> layer_of;
    std::vector<Param*> params = model.params();
    const std::vector<size_t> ready = model.grad_ready_nodes();
    for (size_t k = 0; k < params.size(); ++k) layer_of[params[k]] = ready[k];
    std::reverse(params.begin(), params.end());
    const int64_t cap = bucket_bytes();
    std::vector<std::vector<Param*>> groups;
    int64_t bytes = 0;
    for (Param* p : params) {
        // A bucket closes before the parameter that would take it past its size (the first one's
        // is smaller); a parameter larger than that alone gets a bucket of its own.
        const int64_t limit = groups.size() == 1 ? std::min(kFirstBucketBytes, cap) : cap;
        const int64_t more = static_cast<int64_t>(p->grad.bytes());
        if (groups.empty() || (bytes > 0 && bytes + more > limit)) {
            groups.emplace_back();
            bytes = 0;
        }
        groups.back().push_back(p);
        bytes += more;
    }
    last_layer_ = SIZE_MAX;
    for (const std::vector<Param*>& g : groups) {
        Bucket b;
        b.ready_layer = SIZE_MAX;
        for (Param* p : g) {
            b.elements += p->grad.numel();
            b.ready_layer = std::min(b.ready_layer, layer_of.at(p));
        }
        b.flat = Tensor({b.elements}, DType::F32, dev_);
        ops::fill(dev_, b.flat, 0.0f);  // as the layers' own gradients start
        int64_t at = 0;
        for (Param* p : g) {
            const Shape shape = p->grad.shape();
            p->grad = b.flat.rows(at, p->grad.numel()).reshaped(shape);
            at += p->grad.numel();
        }
        grad_elements_ += b.elements;
        last_layer_ = std::min(last_layer_, b.ready_layer);
        buckets_.push_back(std::move(b));
    }
}

DataParallel::Shard DataParallel::begin_step(int64_t first, int64_t n) {
    const int64_t r = rank(), s = size();
    const int64_t lo = n * r / s, hi = n * (r + 1) / s;
    weight_ = static_cast<float>(static_cast<double>(hi - lo) / static_cast<double>(n));
    ++steps_;
    return {first + lo, hi - lo};
}

void DataParallel::step_without_samples() {
    for (Bucket& b : buckets_) ops::fill(dev_, b.flat, 0.0f);
    for (Bucket& b : buckets_) launch(b);
    finish();
}

// Backward finished layer `layer`: start every bucket it completed; the last one ends the reduction.
void DataParallel::after_layer(size_t layer) {
    for (Bucket& b : buckets_)
        if (b.ready_layer == layer && !b.started) launch(b);
    if (layer == last_layer_) finish();
    else if (!device_path_) ranks_.progress();
}

void DataParallel::launch(Bucket& b) {
    b.started = true;
    if (device_path_) {  // enqueued on the stream after the ops that wrote the gradients
        device_allreduce_sum(dev_, b.flat, weight_);
        return;
    }
    const Clock::time_point t0 = Clock::now();
    b.flat.download();  // a counted copy, unless the device buffer is host memory (native)
    float* g = b.flat.host_read_write<float>();
    if (weight_ != 1.0f)
        for (int64_t i = 0; i < b.elements; ++i) g[i] *= weight_;
    ranks_.start_sum(g, static_cast<size_t>(b.elements));
    reduce_seconds_ += since(t0);
}

void DataParallel::finish() {
    for (Bucket& b : buckets_) b.started = false;
    if (device_path_) return;  // the sums run in stream order before the solver's ops
    const Clock::time_point t0 = Clock::now();
    ranks_.wait_sums("summing gradients");
    wait_seconds_ += since(t0);
    for (Bucket& b : buckets_) b.flat.upload(dev_);  // a counted copy back, or nothing on native
    reduce_seconds_ += since(t0);
}

void DataParallel::agree(bool& show, bool& stop) {
    int64_t flags[2] = {stop ? 1 : 0, root() && show ? 1 : 0};
    ranks_.max(flags, 2, "agreeing on the step's outcome");
    stop = flags[0] != 0;
    show = flags[1] != 0;
}

float DataParallel::global_sum(const Tensor& local) {
    float v = local.to_vector()[0];
    ranks_.sum(&v, 1, "summing the loss");
    return v;
}

io::Dataset DataParallel::shard_of(const io::Dataset& d) const {
    const int64_t lo = d.count * rank() / size(), hi = d.count * (rank() + 1) / size();
    io::Dataset s = d.empty_like();
    s.count = hi - lo;
    if (d.is_tokens()) {  // a token set (text windows): steps tokens and as many labels per sample
        s.tokens.assign(d.tokens.begin() + lo * d.steps, d.tokens.begin() + hi * d.steps);
        s.labels.assign(d.labels.begin() + lo * d.steps, d.labels.begin() + hi * d.steps);
        return s;
    }
    const int64_t per = d.sample_size();
    s.images.assign(d.images.begin() + lo * per, d.images.begin() + hi * per);
    s.labels.assign(d.labels.begin() + lo, d.labels.begin() + hi);
    return s;
}

Scores DataParallel::score(Net& model, Loss& loss, Device& dev, const io::Dataset& shard, int64_t total,
                           int64_t classes, int64_t batch_size) {
    // A sample's loss is its mean per label; the accuracy counts labels (one per image, one per
    // token of a sequence), so every rank's sums are whole counts of labels.
    const double labels_per_sample = shard.is_tokens() ? static_cast<double>(shard.steps) : 1.0;
    double sums[2] = {0, 0};
    if (shard.count > 0) {
        const Scores mine = train::score(model, loss, dev, shard, classes, batch_size);
        sums[0] = mine.loss * static_cast<double>(shard.count);
        sums[1] = std::round(mine.accuracy * static_cast<double>(shard.count) * labels_per_sample);
    }
    ranks_.sum(sums, 2, "summing the validation scores");
    return {sums[0] / static_cast<double>(total), sums[1] / (static_cast<double>(total) * labels_per_sample)};
}

double DataParallel::accuracy(Net& model, Device& dev, const io::Dataset& shard, int64_t total) {
    double correct = shard.count > 0 ? std::round(evaluate(model, dev, shard) * static_cast<double>(shard.count)) : 0;
    ranks_.sum(&correct, 1, "summing the test accuracy");
    return correct / static_cast<double>(total);
}

double DataParallel::accuracy(Net& model, Device& dev, const ResidentData& shard, int64_t total) {
    const int64_t n = shard.images.dim(0);
    double correct = n > 0 ? std::round(evaluate(model, dev, shard) * static_cast<double>(n)) : 0;
    ranks_.sum(&correct, 1, "summing the test accuracy");
    return correct / static_cast<double>(total);
}

void DataParallel::average_buffers(Net& model) {
    const std::vector<Param*> state = model.state();  // the parameters, then the buffers
    for (size_t i = model.params().size(); i < state.size(); ++i) {
        Tensor& t = state[i]->value;
        if (t.dtype() != DType::F32) continue;
        t.download();
        float* v = t.host_read_write<float>();
        ranks_.sum(v, static_cast<size_t>(t.numel()), "averaging the buffers");
        const float inv = 1.0f / static_cast<float>(size());
        for (int64_t i = 0; i < t.numel(); ++i) v[i] *= inv;
        t.upload(dev_);
    }
}

void DataParallel::check_identical(Net& model) {
    uint64_t h = fingerprint("values");
    for (Param* p : model.state()) {
        p->value.download();
        h = fingerprint(p->value.host_read<char>(), p->value.bytes(), h);
    }
    const std::vector<std::vector<uint64_t>> all = ranks_.gather_all({h}, "comparing the trained parameters");
    for (int r = 1; r < size(); ++r)
        if (all[static_cast<size_t>(r)][0] != all[0][0])
            throw RanksAgreeError("after training, rank " + std::to_string(r) +
                                  "'s parameters differ from rank 0's: the ranks applied different updates (every "
                                  "rank must receive the same summed gradients)");
}

std::string DataParallel::describe(int64_t batch_size) const {
    const long long per = batch_size / size();
    char head[160];
    if (batch_size % size()) std::snprintf(head, sizeof head, "global batch %lld = %lld-%lld per rank", static_cast<long long>(batch_size), per, per + 1);
    else std::snprintf(head, sizeof head, "global batch %lld = %lld per rank", static_cast<long long>(batch_size), per);
    std::string s = "data parallel: " + std::to_string(size()) + " ranks (" + ranks_.library() + "), " + head +
                    "; gradients in " + std::to_string(buckets_.size()) + " bucket" + (buckets_.size() == 1 ? "" : "s") +
                    " (" + mib(4.0 * static_cast<double>(grad_elements_)) + ") summed ";
    if (device_path_) s += "by the " + dev_.backend().name() + " plugin on the device (ABI 1.6 collectives)";
    else if (dev_.host_memory()) s += "by MPI in host memory (the device buffers themselves: no copies)";
    else s += "by MPI in host memory (one copy each way per bucket)";
    return s + "\n";
}

std::string DataParallel::summary() const {
    if (steps_ == 0) return "";
    char buf[256];
    if (device_path_) {
        std::snprintf(buf, sizeof buf, "gradient allreduce: %lld steps on the device stream (not timed: no host wait)\n",
                      static_cast<long long>(steps_));
        return buf;
    }
    const double n = static_cast<double>(steps_);
    std::snprintf(buf, sizeof buf,
                  "gradient allreduce: %.3f ms per step over %zu bucket%s (%.3f ms of it waiting for the sums), "
                  "%lld steps; parameters identical on all %d ranks\n",
                  1e3 * reduce_seconds_ / n, buckets_.size(), buckets_.size() == 1 ? "" : "s", 1e3 * wait_seconds_ / n,
                  static_cast<long long>(steps_), size());
    return buf;
}

}  // namespace xylem::train
