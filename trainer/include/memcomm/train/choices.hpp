// The named choices of memcomm-train's flags (--backend, --model, --optimizer ...) as enums: CLI11
// turns a name into its value once, at parse time (Note [Choices are parsed once]), and to_string
// gives back the very name the flag takes, for --help, the summary JSON, checkpoints and traces.
// Free of LibTorch and of CLI11.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace memcomm::train {

enum class Backend { Auto, Gloo, Nccl };                   // --backend
enum class DeviceKind { Auto, Cpu, Cuda };                 // --device
enum class Mode { Ddp, Dp };                               // --mode
enum class DatasetKind { Auto, FashionMnist, Tabular, Tokens };  // --dataset
enum class Tail { Pad, Drop };                             // --tail
enum class ModelKind { Mlp, Cnn, Transformer };            // --model
enum class OptimizerKind { Sgd, Adam, AdamW };             // --optimizer
enum class Schedule { None, Step, Cosine };                // --schedule
enum class GradCompression { None, Bf16, Fp16 };           // --grad-compression
enum class Amp { None, Bf16 };                             // --amp
enum class Cupti { Auto, On, Off };                        // --cupti
enum class AllocatorKind { Memcomm, Torch };               // --allocator

// Note [Choices are parsed once]: each enum's names, indexed by its values, are the one place a
// choice is spelled. The flag accepts exactly these (case-sensitive, as the flags always were) and
// refuses anything else at parse time, naming the flag and the names (exit 2); code past parsing
// switches over the enum, so the compiler checks that every choice is handled.
template <typename E>
struct ChoiceNames;  // static constexpr std::array<const char*, N> names
template <> struct ChoiceNames<Backend> { static constexpr std::array<const char*, 3> names{"auto", "gloo", "nccl"}; };
template <> struct ChoiceNames<DeviceKind> { static constexpr std::array<const char*, 3> names{"auto", "cpu", "cuda"}; };
template <> struct ChoiceNames<Mode> { static constexpr std::array<const char*, 2> names{"ddp", "dp"}; };
template <> struct ChoiceNames<DatasetKind> {
  static constexpr std::array<const char*, 4> names{"auto", "fashion-mnist", "tabular", "tokens"};
};
template <> struct ChoiceNames<Tail> { static constexpr std::array<const char*, 2> names{"pad", "drop"}; };
template <> struct ChoiceNames<ModelKind> { static constexpr std::array<const char*, 3> names{"mlp", "cnn", "transformer"}; };
template <> struct ChoiceNames<OptimizerKind> { static constexpr std::array<const char*, 3> names{"sgd", "adam", "adamw"}; };
template <> struct ChoiceNames<Schedule> { static constexpr std::array<const char*, 3> names{"none", "step", "cosine"}; };
template <> struct ChoiceNames<GradCompression> {
  static constexpr std::array<const char*, 3> names{"none", "bf16", "fp16"};
};
template <> struct ChoiceNames<Amp> { static constexpr std::array<const char*, 2> names{"none", "bf16"}; };
template <> struct ChoiceNames<Cupti> { static constexpr std::array<const char*, 3> names{"auto", "on", "off"}; };
template <> struct ChoiceNames<AllocatorKind> { static constexpr std::array<const char*, 2> names{"memcomm", "torch"}; };

// The name a flag takes for `value`: one plain overload per enum, not a template, so that CLI11's
// own enum to_string (found by argument-dependent lookup) is never ambiguous with it.
template <typename E>
const char* choice_name(E value) {
  return ChoiceNames<E>::names[static_cast<std::size_t>(value)];
}
inline const char* to_string(Backend v) { return choice_name(v); }
inline const char* to_string(DeviceKind v) { return choice_name(v); }
inline const char* to_string(Mode v) { return choice_name(v); }
inline const char* to_string(DatasetKind v) { return choice_name(v); }
inline const char* to_string(Tail v) { return choice_name(v); }
inline const char* to_string(ModelKind v) { return choice_name(v); }
inline const char* to_string(OptimizerKind v) { return choice_name(v); }
inline const char* to_string(Schedule v) { return choice_name(v); }
inline const char* to_string(GradCompression v) { return choice_name(v); }
inline const char* to_string(Amp v) { return choice_name(v); }
inline const char* to_string(Cupti v) { return choice_name(v); }
inline const char* to_string(AllocatorKind v) { return choice_name(v); }

// The value named `name`, or nothing when no value of E has that name.
template <typename E, typename = decltype(ChoiceNames<E>::names)>
std::optional<E> choice_from_string(std::string_view name) {
  for (std::size_t i = 0; i < ChoiceNames<E>::names.size(); ++i)
    if (name == ChoiceNames<E>::names[i]) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace memcomm::train
