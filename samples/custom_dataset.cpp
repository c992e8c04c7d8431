// The tutorials' CustomDataset + DataLoader, in LibTorch: a dataset class with get() and size(),
// a DataLoader with worker threads and shuffling, and a training loop over it.
// memcomm-train's own loader (trainer/src/data.cpp) adds sharding across ranks and a bounded
// prefetch ring, but the shape is the same.
#include <torch/torch.h>

#include <cstdio>

// Like the tutorials' `class CustomDataset(Dataset)`: the data live in tensors, get() returns one sample.
class CustomDataset : public torch::data::datasets::Dataset<CustomDataset> {
 public:
  CustomDataset(int64_t n, int64_t features) {
    torch::manual_seed(0);
    data_ = torch::randn({n, features});
    labels_ = (data_.sum(1) > 0).to(torch::kInt64);  // a rule the model can learn
  }
  torch::data::Example<> get(size_t i) override { return {data_[int64_t(i)], labels_[int64_t(i)]}; }
  torch::optional<size_t> size() const override { return size_t(data_.size(0)); }

 private:
  torch::Tensor data_, labels_;
};

int main() {
  auto dataset = CustomDataset(4096, 16).map(torch::data::transforms::Stack<>());
  // DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2)
  auto loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      std::move(dataset), torch::data::DataLoaderOptions().batch_size(64).workers(2));
  torch::nn::Sequential model(torch::nn::Linear(16, 32), torch::nn::ReLU(), torch::nn::Linear(32, 2));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  double accuracy = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    double loss_sum = 0;
    int64_t correct = 0, seen = 0, batches = 0;
    for (auto& batch : *loader) {
      opt.zero_grad();
      auto logits = model->forward(batch.data);
      auto loss = torch::nn::functional::cross_entropy(logits, batch.target);
      loss.backward();
      opt.step();
      loss_sum += loss.item<double>();
      correct += logits.argmax(1).eq(batch.target).sum().item<int64_t>();
      seen += batch.target.size(0);
      ++batches;
    }
    accuracy = double(correct) / double(seen);
    std::printf("epoch %d: loss %.4f accuracy %.1f%%\n", epoch, loss_sum / double(batches), 100.0 * accuracy);
  }
  // The rule (sum > 0) is linear: a model that does not learn it means the loop is broken.
  if (accuracy < 0.9) {
    std::fprintf(stderr, "custom_dataset: accuracy %.1f%% after 3 epochs, expected at least 90%%\n", 100.0 * accuracy);
    return 1;
  }
  return 0;
}
