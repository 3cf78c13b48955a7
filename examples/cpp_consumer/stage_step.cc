// One training step of a tiny C++ LLaMA stage (the whole model on one stage, float64), from an
// installed InfiniPipe with its runtime: two documents packed into one chunk, forward through
// the stage's embedding, layers and head, the next-token loss, backward. Prints the loss
// (about ln 512 = 6.24 for random weights) and the gradients' norm.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "infinipipe/models/llama.h"
#include "infinipipe/runtime/chunk_context.h"
#include "infinipipe/runtime/next_token_loss.h"

int main() {
  using namespace infinipipe;
  models::LlamaConfig config;
  config.vocab = 512;
  config.hidden = 64;
  config.layers = 2;
  config.heads = 4;
  config.kv_heads = 2;
  config.ffn = 128;
  config.dtype = at::kDouble;
  auto stage = models::build_stage(config, {2}, /*stage=*/0);

  std::vector<at::Tensor> documents = {torch::randint(512, {40}), torch::randint(512, {24})};
  std::vector<Slice> slices = {{0, 0, 40, 40}, {1, 0, 24, 24}};  // both whole: a packed chunk
  auto context = std::make_shared<runtime::ChunkContext>(slices);
  at::Tensor hidden = stage->embed(torch::cat(documents), *context);
  for (int layer = 0; layer < stage->num_layers(); ++layer) {
    hidden = stage->layer(layer, hidden, *context);
  }
  at::Tensor targets = runtime::next_token_targets(slices, documents);
  double target_tokens = (targets != runtime::kIgnoreIndex).sum().item<double>();
  at::Tensor loss = runtime::next_token_loss(stage->head(hidden, *context), targets, target_tokens);
  loss.backward();

  double squares = 0;
  for (const at::Tensor& p : stage->parameters()) squares += p.grad().pow(2).sum().item<double>();
  std::printf("loss %.4f (ln 512 = %.4f), gradient norm %.4f\n", loss.item<double>(),
              std::log(512.0), std::sqrt(squares));
  return 0;
}
