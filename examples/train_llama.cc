// Trains the tiny LLaMA with elastic pipeline parallelism from C++ alone: no Python anywhere.
//
//   torchrun --no-python --nproc_per_node=2 build/train_llama_cpp --steps 20
//   torchrun --no-python --nproc_per_node=4 build/train_llama_cpp --sequence 2   # 2 stages x SP 2
//
// torchrun only starts the processes and sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
// Each process connects to the rendezvous store, builds a Gloo process group, builds its stage
// of the decoder (the C++ LlamaStage), and every step: samples sequence lengths from the
// built-in Wikipedia sampler, makes synthetic but learnable tokens (each sequence counts up
// from a random start with a random stride), plans the step with the C++ planner, checks that
// every rank holds the same plan, runs its stage with the executor and steps AdamW. Rank 0
// prints the loss and throughput of every step. docs/runtime.md explains how the process group
// is built ("From C++ alone"). With --sequence and --replicas the world is the paper's layout
// (docs/design.md, "Parallel layout"): each stage a group of Ulysses sequence ranks, pipelines
// replicated for data parallelism, each replica planning its cost-balanced share of the batch,
// and every stage's gradients summed over its gradient group before AdamW (no ZeRO here: the
// Python trainer shards the optimizer state). With --spread-head every stage holds a replica of
// the final norm and LM head, the planner runs each chunk's head on the stage it assigns
// (docs/design.md, "Spread head"), and the head's gradients are summed over every rank.
#include <ATen/Context.h>
#include <torch/optim/adamw.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "infinipipe/core/error.h"
#include "infinipipe/cost/cost_model.h"
#include "infinipipe/cost/parallel_layout.h"
#include "infinipipe/data/length_sampler.h"
#include "infinipipe/models/llama.h"
#include "infinipipe/planner/data_split.h"
#include "infinipipe/planner/planner.h"
#include "infinipipe/runtime/executor.h"

namespace ip = infinipipe;

namespace {

struct Args {
  int steps = 20;
  int batch = 8;
  int64_t context = 1024;
  std::string distribution = "wikipedia";
  std::string method = "epp";
  int k = 4;                   // seq1f1b: slices per micro-batch
  int64_t chunk_tokens = 512;  // chunkflow
  double memory_gib = 2.0;     // per stage, model state included
  double lr = 1e-2;
  uint64_t seed = 0;
  double timeout_s = 300;
  int sequence = 1;  // Ulysses ranks per stage
  int replicas = 1;  // data-parallel pipelines
  bool spread_head = false;
  bool keep_denormals = false;
};

std::string env(const char* name) {
  const char* value = std::getenv(name);
  ip::check(value != nullptr && *value != '\0',
            std::string("the environment variable ") + name +
                " is not set: launch with torchrun --no-python --nproc_per_node=<stages> " +
                "<this binary> (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
  return value;
}

int env_int(const char* name) {
  const std::string text = env(name);
  try {
    return std::stoi(text);
  } catch (const std::exception&) {
    throw ip::Error(std::string(name) + "='" + text + "' is not an integer");
  }
}

// The rendezvous store torchrun hosts. Under torchrun the agent already serves it at
// MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), so every rank is a client;
// launched by hand, rank 0 serves it.
c10::intrusive_ptr<c10d::Store> rendezvous_store(int rank, int world,
                                                 std::chrono::milliseconds timeout) {
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(env_int("MASTER_PORT"));
  store_options.isServer = rank == 0 && !(agent && std::string(agent) == "True");
  store_options.numWorkers = world;
  store_options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(env("MASTER_ADDR"), store_options);
}

// A Gloo group of `ranks` (global ranks; this rank among them) over the store, in a key space
// of its own: the world, or one of the layout's subgroups, which only their members build.
c10::intrusive_ptr<c10d::ProcessGroup> gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                  const std::string& name,
                                                  const std::vector<int>& ranks, int rank,
                                                  std::chrono::milliseconds timeout) {
  const int size = static_cast<int>(ranks.size());
  const int index = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("infinipipe_cpp/" + name, store);
  const std::string address = env("MASTER_ADDR");
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"); interface && *interface)
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
  else if (address == "localhost" || address.rfind("127.", 0) == 0)
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, index, size, options);
  auto group = c10::make_intrusive<c10d::ProcessGroup>(prefixed, index, size);
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  return group;
}

// The step's gradients complete on every rank of the stage's gradient group: each rank's cover
// its own rows of its replica's share, and the loss was averaged over the whole batch, so the
// sum is the batch's gradient (one flat all-reduce).
void sum_gradients(std::vector<at::Tensor>& parameters, c10d::ProcessGroup& group,
                   std::chrono::milliseconds timeout) {
  std::vector<at::Tensor> flat_parts;
  for (at::Tensor& p : parameters)
    flat_parts.push_back(p.grad().defined() ? p.grad().reshape(-1)
                                            : at::zeros({p.numel()}, p.options()));
  std::vector<at::Tensor> flat{at::cat(flat_parts)};
  auto work = group.allreduce(flat);
  ip::check(work->wait(timeout), "the gradient all-reduce did not finish");
  int64_t offset = 0;
  for (at::Tensor& p : parameters) {
    at::Tensor summed = flat[0].narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
    p.mutable_grad() = summed.clone();
  }
}

// The same tokens on every rank: a learnable pattern, so the loss visibly falls.
std::vector<at::Tensor> synthetic_batch(const std::vector<int64_t>& lengths, int64_t vocab,
                                        std::mt19937_64& rng) {
  std::vector<at::Tensor> batch;
  for (int64_t n : lengths) {
    const int64_t start = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
    const int64_t stride = 1 + static_cast<int64_t>(rng() % 3);
    batch.push_back(at::remainder(at::arange(n, at::kLong) * stride + start, vocab));
  }
  return batch;
}

// Every rank plans on its own, with the trainer's options (deterministic: no CBC).
ip::Plan plan_step(const Args& args, const std::vector<int64_t>& lengths,
                   const ip::CostModel& cost) {
  ip::PlannerOptions options =
      ip::PlannerOptions::for_training(cost.num_stages(), args.memory_gib * (1ull << 30));
  options.spread_head = args.spread_head;
  ip::Setting setting;
  setting.k = args.k;
  setting.chunk_tokens = args.chunk_tokens;
  return ip::plan_step(ip::parse_method(args.method), lengths, cost, options, setting);
}

// Every rank planned on its own; the ranks of a replica (`ranks`) must run the same schedule.
// One store round: each rank publishes its plan's hash and compares with theirs.
void check_same_plan(c10d::Store& store, int step, int rank, const std::vector<int>& ranks,
                     const ip::Plan& plan) {
  const std::string mine = plan.hash();
  const std::string prefix = "plan/" + std::to_string(step) + "/";
  store.set(prefix + std::to_string(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::string differing;
  for (int r : ranks) {
    const std::vector<uint8_t> theirs = store.get(prefix + std::to_string(r));
    const std::string hash(theirs.begin(), theirs.end());
    if (hash != mine) differing += " rank " + std::to_string(r) + " has " + hash + ";";
  }
  ip::check(differing.empty(), "step " + std::to_string(step) + ": rank " + std::to_string(rank) +
                                   " planned " + mine + " but" + differing +
                                   " every rank must plan the same batch alike");
}

int run(const Args& args) {
  const int rank = env_int("RANK");
  const int world = env_int("WORLD_SIZE");
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000));
  // This process is the example's own, so it flushes denormal floats to zero as the Python
  // example does: on the CPU some values of a few dozen steps' training turn denormal, and one
  // Intel Xeon then ran the steps up to 6x slower (docs/runtime.md, "Denormal numbers on the CPU").
  const bool flushed = !args.keep_denormals && at::globalContext().setFlushDenormal(true);
  if (rank == 0)
    std::printf("denormal floats: %s\n", flushed ? "flushed to zero"
                                         : args.keep_denormals
                                             ? "kept (--keep-denormals)"
                                             : "kept (this CPU cannot flush them)");

  ip::ParallelLayout layout;
  layout.sequence = args.sequence;
  layout.data = args.replicas;
  layout.gpus_per_node = world;  // one host
  layout.validate();
  const int inner = args.sequence * args.replicas;
  ip::check(world % inner == 0,
            "the world of " + std::to_string(world) +
                " processes is not a multiple of sequence x replicas = " + std::to_string(inner));
  const int stages = world / inner;
  const ip::ParallelLayout::Place place = layout.place(rank, stages);

  // The model: the planner's built-in "tiny" shape in float32; planned per rank of the layout.
  const ip::models::LlamaConfig config =
      ip::models::LlamaConfig::from_shape(ip::ModelShape::builtin("tiny"), at::kFloat);
  const std::vector<int> split = ip::even_layer_split(static_cast<int>(config.layers), stages);
  const ip::CostModel cost(
      config.shape("tiny"), split,
      ip::CostCoefficients::analytic(config.shape("tiny"), ip::Hardware::builtin("cpu")), layout);
  // With the spread head every stage holds the head; its initialisation is seeded by the
  // parameter's name, so the replicas start equal.
  int first_layer = 0;
  for (int s = 0; s < place.stage; ++s) first_layer += split[s];
  auto stage = std::make_shared<ip::models::LlamaStage>(
      config, first_layer, first_layer + split[place.stage], place.stage == 0,
      place.stage == stages - 1 || args.spread_head, args.seed);

  auto store = rendezvous_store(rank, world, timeout);
  std::vector<int> everyone(world);
  for (int r = 0; r < world; ++r) everyone[r] = r;
  auto group = gloo_group(store, "world", everyone, rank, timeout);
  const std::vector<int> sequence_ranks = layout.sequence_ranks(rank, stages);
  const std::vector<int> gradient_ranks = layout.gradient_ranks(place.stage, stages);
  std::vector<int> replica_ranks;  // every stage and sequence rank of this rank's replica
  for (int i = 0; i < stages * args.sequence; ++i)
    replica_ranks.push_back(place.replica * stages * args.sequence + i);
  ip::runtime::ExecutorOptions options;
  options.stage = place.stage;
  options.num_stages = stages;
  options.stage_ranks = layout.pipeline_ranks(rank, stages);
  options.dtype = config.dtype;
  options.hidden = config.hidden;
  options.kv_heads = config.kv_heads;
  options.head_dim = config.head_dim();
  options.timeout = timeout;
  if (args.sequence > 1) {
    options.sequence_group = gloo_group(store, "sequence/" + std::to_string(sequence_ranks[0]),
                                        sequence_ranks, rank, timeout);
    options.sequence_ranks = sequence_ranks;
  }
  auto gradient_group = gradient_ranks.size() > 1
                            ? gloo_group(store, "gradients/" + std::to_string(place.stage),
                                         gradient_ranks, rank, timeout)
                            : nullptr;
  ip::runtime::Executor executor(stage, group, options);
  std::vector<at::Tensor> parameters = stage->parameters();
  torch::optim::AdamW optimizer(parameters, torch::optim::AdamWOptions(args.lr));
  // A spread head's replicas each hold the gradients of the heads their stage ran: one sum over
  // every rank makes them the batch's; the other parameters sum over the stage's gradient group.
  std::vector<at::Tensor> head_parameters, stage_parameters;
  for (const auto& [name, p] : stage->named_parameters()) {
    const bool head = name == "norm.weight" || name == "lm_head.weight";
    (args.spread_head && head ? head_parameters : stage_parameters).push_back(p);
  }
  std::vector<long long> heads_run(stages, 0);  // per stage, over the steps

  std::string layers;
  for (int n : split) layers += (layers.empty() ? "" : ", ") + std::to_string(n);
  if (rank == 0)
    std::printf(
        "InfiniPipe C++ trainer: %d stages (layers %s) x %d sequence ranks x %d replicas, Gloo, "
        "%s, %d sequences of '%s' lengths up to %lld per step\n",
        stages, layers.c_str(), args.sequence, args.replicas, args.method.c_str(), args.batch,
        args.distribution.c_str(), static_cast<long long>(args.context));
  std::mt19937_64 rng(args.seed);
  double first_loss = 0, loss = 0;
  for (int step = 0; step < args.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int64_t> lengths =
        ip::sample_lengths(args.distribution, args.batch, args.context, args.seed + step);
    const std::vector<at::Tensor> batch = synthetic_batch(lengths, config.vocab, rng);
    // This replica's share of the batch (all of it without replicas); the loss is averaged
    // over the whole batch's targets so the replicas' gradients add up.
    const std::vector<int> share =
        ip::split_over_replicas(lengths, cost, args.replicas).at(place.replica);
    std::vector<int64_t> share_lengths;
    std::vector<at::Tensor> share_batch;
    for (int i : share) {
      share_lengths.push_back(lengths[i]);
      share_batch.push_back(batch[i]);
    }
    int64_t targets = 0;
    for (int64_t n : lengths) targets += n - 1;
    const ip::Plan plan = plan_step(args, share_lengths, cost);
    check_same_plan(*group->getStore(), step, rank, replica_ranks, plan);

    for (at::Tensor& p : parameters) p.mutable_grad().reset();
    const ip::runtime::StepStats stats = executor.run(plan, share_batch, targets);
    if (gradient_group) sum_gradients(stage_parameters, *gradient_group, timeout);
    if (!head_parameters.empty() && world > 1) sum_gradients(head_parameters, *group, timeout);
    for (int o : plan.schedule.head_stages(static_cast<int>(plan.chunks.size())))
      ++heads_run[o >= 0 ? o : stages - 1];  // -1: in the last stage's forward
    optimizer.step();

    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    loss = stats.loss;
    if (step == 0) first_loss = loss;
    if (rank == 0)
      std::printf(
          "step %3d  loss %.4f  tokens %6lld  %8.0f tokens/s  plan %s (%zu chunks, %zu "
          "waves)\n",
          step, loss, static_cast<long long>(plan.tokens()), plan.tokens() / seconds,
          ip::describe(plan.method, plan.setting).c_str(), plan.chunks.size(), plan.waves.size());
    std::fflush(stdout);
  }
  if (rank == 0 && args.steps > 0)
    std::printf("loss %.4f -> %.4f over %d steps\n", first_loss, loss, args.steps);
  if (rank == 0 && args.spread_head) {
    std::string per_stage;
    for (long long n : heads_run) per_stage += (per_stage.empty() ? "" : ", ") + std::to_string(n);
    std::printf("LM heads run per stage over the steps (spread head): [%s]\n", per_stage.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Train a tiny LLaMA with InfiniPipe from C++ (launch with torchrun --no-python)"};
  app.add_option("--steps", args.steps, "training steps")->capture_default_str();
  app.add_option("--batch", args.batch, "sequences per step")->capture_default_str();
  app.add_option("--context", args.context, "longest sequence")->capture_default_str();
  app.add_option("--distribution", args.distribution, "length sampler")
      ->check(CLI::IsMember(ip::distribution_names()))
      ->capture_default_str();
  app.add_option("--method", args.method, "epp, batch, seq1f1b or chunkflow")
      ->check(CLI::IsMember({"epp", "batch", "seq1f1b", "chunkflow"}))
      ->capture_default_str();
  app.add_option("--k", args.k, "slices per micro-batch (seq1f1b)")->capture_default_str();
  app.add_option("--chunk-tokens", args.chunk_tokens, "chunk size (chunkflow)")
      ->capture_default_str();
  app.add_option("--memory-gib", args.memory_gib, "memory budget per stage")->capture_default_str();
  app.add_option("--lr", args.lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--seed", args.seed, "weights and data")->capture_default_str();
  app.add_option("--timeout-s", args.timeout_s, "longest wait on a peer")->capture_default_str();
  app.add_option("--sequence", args.sequence, "Ulysses sequence-parallel ranks per stage")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--replicas", args.replicas, "data-parallel pipeline replicas")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--spread-head", args.spread_head,
               "run chunks' LM heads on the stages the planner assigns (every stage holds the "
               "head)");
  app.add_flag("--keep-denormals", args.keep_denormals,
               "compute on denormal floats as they are instead of flushing them to zero");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    const char* rank = std::getenv("RANK");
    std::fprintf(stderr, "rank %s: error: %s\n", rank ? rank : "?", e.what());
    return 1;
  }
}
