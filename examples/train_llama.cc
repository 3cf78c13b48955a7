// Trains the tiny LLaMA with elastic pipeline parallelism from C++ alone: no Python anywhere.
//
//   torchrun --no-python --nproc_per_node=2 build/train_llama_cpp --steps 20
//
// torchrun only starts the processes and sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
// Each process connects to the rendezvous store, builds a Gloo process group, builds its stage
// of the decoder (the C++ LlamaStage), and every step: samples sequence lengths from the
// built-in Wikipedia sampler, makes synthetic but learnable tokens (each sequence counts up
// from a random start with a random stride), plans the step with the C++ planner, checks that
// every rank holds the same plan, runs its stage with the executor and steps AdamW. Rank 0
// prints the loss and throughput of every step. docs/runtime.md explains how the process group
// is built ("From C++ alone").
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
#include "infinipipe/data/length_sampler.h"
#include "infinipipe/models/llama.h"
#include "infinipipe/plan/planner.h"
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

// Gloo over the rendezvous store torchrun hosts. Under torchrun the agent already serves the
// store at MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), so every rank is a
// client; launched by hand, rank 0 serves it.
c10::intrusive_ptr<c10d::ProcessGroup> gloo_group(int rank, int world,
                                                  std::chrono::milliseconds timeout) {
  const std::string address = env("MASTER_ADDR");
  const int port = env_int("MASTER_PORT");
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(port);
  store_options.isServer = rank == 0 && !(agent && std::string(agent) == "True");
  store_options.numWorkers = world;
  store_options.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(address, store_options);
  // Our own key space, apart from the agent's.
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("infinipipe_cpp", store);

  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"); interface && *interface)
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
  else if (address == "localhost" || address.rfind("127.", 0) == 0)
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, world, options);

  auto group = c10::make_intrusive<c10d::ProcessGroup>(prefixed, rank, world);
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  return group;
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
  const ip::PlannerOptions options =
      ip::PlannerOptions::for_training(cost.num_stages(), args.memory_gib * (1ull << 30));
  ip::Setting setting;
  setting.k = args.k;
  setting.chunk_tokens = args.chunk_tokens;
  return ip::plan_step(ip::parse_method(args.method), lengths, cost, options, setting);
}

// Every rank planned on its own; they must run the same schedule. One store round: each rank
// publishes its plan's hash and compares with everyone's.
void check_same_plan(c10d::Store& store, int step, int rank, int world, const ip::Plan& plan) {
  const std::string mine = plan.hash();
  const std::string prefix = "plan/" + std::to_string(step) + "/";
  store.set(prefix + std::to_string(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::string differing;
  for (int r = 0; r < world; ++r) {
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

  // The model: the planner's built-in "tiny" shape in float32.
  const ip::models::LlamaConfig config =
      ip::models::LlamaConfig::from_shape(ip::ModelShape::builtin("tiny"), at::kFloat);
  const std::vector<int> split = ip::even_layer_split(static_cast<int>(config.layers), world);
  const ip::CostModel cost(
      config.shape("tiny"), split,
      ip::CostCoefficients::analytic(config.shape("tiny"), ip::Hardware::builtin("cpu")));
  auto stage = ip::models::build_stage(config, split, rank, args.seed);

  auto group = gloo_group(rank, world, timeout);
  ip::runtime::ExecutorOptions options;
  options.stage = rank;
  options.num_stages = world;
  options.dtype = config.dtype;
  options.hidden = config.hidden;
  options.kv_heads = config.kv_heads;
  options.head_dim = config.head_dim();
  options.timeout = timeout;
  ip::runtime::Executor executor(stage, group, options);
  std::vector<at::Tensor> parameters = stage->parameters();
  torch::optim::AdamW optimizer(parameters, torch::optim::AdamWOptions(args.lr));

  std::string layers;
  for (int n : split) layers += (layers.empty() ? "" : ", ") + std::to_string(n);
  if (rank == 0)
    std::printf(
        "InfiniPipe C++ trainer: %d stages (layers %s), Gloo, %s, %d sequences of "
        "'%s' lengths up to %lld per step\n",
        world, layers.c_str(), args.method.c_str(), args.batch, args.distribution.c_str(),
        static_cast<long long>(args.context));
  std::mt19937_64 rng(args.seed);
  double first_loss = 0, loss = 0;
  for (int step = 0; step < args.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int64_t> lengths =
        ip::sample_lengths(args.distribution, args.batch, args.context, args.seed + step);
    const std::vector<at::Tensor> batch = synthetic_batch(lengths, config.vocab, rng);
    const ip::Plan plan = plan_step(args, lengths, cost);
    check_same_plan(*group->getStore(), step, rank, world, plan);

    for (at::Tensor& p : parameters) p.mutable_grad().reset();
    const ip::runtime::StepStats stats = executor.run(plan, batch);
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
  CLI11_PARSE(app, argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    const char* rank = std::getenv("RANK");
    std::fprintf(stderr, "rank %s: error: %s\n", rank ? rank : "?", e.what());
    return 1;
  }
}
