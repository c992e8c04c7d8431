#include <memcomm/train/models.hpp>

#include <memcomm/train/options.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <mutex>

namespace memcomm::train {

namespace nn = torch::nn;

namespace {

class Mlp final : public ModelImpl {
 public:
  Mlp(int64_t in, int64_t hidden, int64_t classes)
      : fc1_(register_module("fc1", nn::Linear(in, hidden))),
        fc2_(register_module("fc2", nn::Linear(hidden, hidden))),
        out_(register_module("out", nn::Linear(hidden, classes))) {}
  torch::Tensor forward(const torch::Tensor& x) override {
    auto h = torch::relu(fc1_(x.flatten(1)));
    return out_(torch::relu(fc2_(h)));
  }

 private:
  nn::Linear fc1_, fc2_, out_;
};

// The classic small Fashion-MNIST CNN: two conv+pool stages, then two linear layers.
class Cnn final : public ModelImpl {
 public:
  explicit Cnn(int64_t classes)
      : conv1_(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)))),
        conv2_(register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)))),
        fc1_(register_module("fc1", nn::Linear(64 * 7 * 7, 128))),
        out_(register_module("out", nn::Linear(128, classes))) {}
  torch::Tensor forward(const torch::Tensor& x) override {
    // Rows of 784 features (the tabular set) are read as 28 x 28 images, so the CNN runs on
    // synthetic data too (machines without the Fashion-MNIST package).
    const auto images = x.dim() == 2 ? x.view({x.size(0), 1, 28, 28}) : x;
    auto h = torch::max_pool2d(torch::relu(conv1_(images)), 2);
    h = torch::max_pool2d(torch::relu(conv2_(h)), 2);
    return out_(torch::relu(fc1_(h.flatten(1))));
  }

 private:
  nn::Conv2d conv1_, conv2_;
  nn::Linear fc1_, out_;
};

// Pre-LayerNorm decoder block with causal multi-head self-attention.
class Block final : public torch::nn::Module {
 public:
  Block(int64_t width, int64_t heads)
      : heads_(heads),
        ln1_(register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({width})))),
        qkv_(register_module("qkv", nn::Linear(width, 3 * width))),
        proj_(register_module("proj", nn::Linear(width, width))),
        ln2_(register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({width})))),
        up_(register_module("up", nn::Linear(width, 4 * width))),
        down_(register_module("down", nn::Linear(4 * width, width))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2), hd = C / heads_;
    auto qkv = qkv_(ln1_(x)).view({B, T, 3, heads_, hd}).permute({2, 0, 3, 1, 4});
    auto att = torch::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], {}, 0.0, /*is_causal=*/true);
    auto h = x + proj_(att.transpose(1, 2).reshape({B, T, C}));
    return h + down_(torch::gelu(up_(ln2_(h))));
  }

 private:
  int64_t heads_;
  nn::LayerNorm ln1_;
  nn::Linear qkv_, proj_;
  nn::LayerNorm ln2_;
  nn::Linear up_, down_;
};

class Transformer final : public ModelImpl {
 public:
  Transformer(int64_t vocab, int64_t width, int64_t heads, int64_t layers, int64_t seq_len)
      : tok_(register_module("tok", nn::Embedding(vocab, width))),
        pos_(register_module("pos", nn::Embedding(seq_len, width))),
        ln_f_(register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({width})))),
        head_(register_module("head", nn::Linear(nn::LinearOptions(width, vocab).bias(false)))) {
    for (int64_t i = 0; i < layers; ++i)
      blocks_.push_back(register_module("block" + std::to_string(i), std::make_shared<Block>(width, heads)));
  }
  torch::Tensor forward(const torch::Tensor& tokens) override {
    auto positions = torch::arange(tokens.size(1), tokens.options());
    auto h = tok_(tokens) + pos_(positions).unsqueeze(0);
    for (auto& b : blocks_) h = b->forward(h);
    return head_(ln_f_(h));
  }

 private:
  nn::Embedding tok_, pos_;
  std::vector<std::shared_ptr<Block>> blocks_;
  nn::LayerNorm ln_f_;
  nn::Linear head_;
};

}  // namespace

torch::Tensor ModelImpl::loss(const torch::Tensor& logits, const torch::Tensor& targets) const {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

int64_t ModelImpl::correct(const torch::Tensor& logits, const torch::Tensor& targets) const {
  return logits.argmax(-1).eq(targets).sum().item<int64_t>();
}

std::shared_ptr<ModelImpl> make_model(const TrainOptions& o, int64_t num_classes) {
  std::shared_ptr<ModelImpl> m;
  switch (o.model) {
    case ModelKind::Mlp: m = std::make_shared<Mlp>(784, o.hidden, num_classes); break;
    case ModelKind::Cnn: m = std::make_shared<Cnn>(num_classes); break;
    case ModelKind::Transformer:
      m = std::make_shared<Transformer>(o.vocab, o.width, o.heads, o.layers, o.seq_len);
      break;
  }
  m->make_fresh_ = [o, num_classes] { return make_model(o, num_classes); };
  return m;
}

// Note [Replicas for --mode dp]: data_parallel replicates the model with clone(device) on every step
// and then points each replica parameter's gradient edge at the original (replicate_grad_edges), so
// the replica must have the same modules, parameter names and order. nn::Cloneable would provide that
// but needs each model to be its own Module root; our models share the ModelImpl interface instead,
// so clone() builds a fresh model of the same shape and copies every parameter and buffer into it.
// Building initialises parameters from the default generator; its state is put back, so the
// training thread's later draws are those of a run without replicas (a draw by another thread
// between the save and the restore would be repeated: the generator's lock cannot be held across
// make_fresh_, which takes it). Like nn::Cloneable, this builds each replica on every step.
std::shared_ptr<torch::nn::Module> ModelImpl::clone(const std::optional<torch::Device>& device) const {
  TORCH_CHECK(make_fresh_, "ModelImpl::clone: models come from make_model()");
  auto gen = at::detail::getDefaultCPUGenerator();
  at::Tensor saved;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    saved = gen.get_state();
  }
  auto copy = make_fresh_();
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(saved);
  }
  torch::NoGradGuard no_grad;
  const auto copy_all = [&device](const auto& from, const auto& to) {
    for (const auto& item : from) {
      const auto* dst = to.find(item.key());
      TORCH_CHECK(dst, "ModelImpl::clone: the fresh model has no tensor named ", item.key());
      const auto& src = item.value();
      dst->set_data(device && src.device() != *device ? src.to(*device) : src.clone());
    }
  };
  copy_all(named_parameters(), copy->named_parameters());
  copy_all(named_buffers(), copy->named_buffers());
  copy->train(is_training());
  return copy;
}

int64_t parameter_count(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

uint64_t parameter_checksum(const std::vector<torch::Tensor>& params) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& p : params) {
    auto c = p.detach().to(torch::kCPU).contiguous();
    const auto* b = static_cast<const unsigned char*>(c.data_ptr());
    for (int64_t i = 0; i < c.numel() * c.element_size(); ++i) h = (h ^ b[i]) * 1099511628211ULL;
  }
  return h;
}


}  // namespace memcomm::train
