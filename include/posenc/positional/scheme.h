// The positional-scheme interface (docs/ARCHITECTURE.md, "Positional schemes").
//
// A scheme is a torch::nn::Module with hooks that all default to "do nothing".
// The model and attention call every hook a scheme declares in capabilities();
// they never test a scheme's name. Positions are explicit integer tensors, so
// offsets or randomized positions are the same scheme given other ids.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "posenc/positional/registry.h"

namespace posenc {

/// Which hooks a scheme uses. Attention uses it to pick its path.
struct Capabilities {
  bool embed = false;        ///< embed(x, positions) before a block
  bool rotate = false;       ///< rotate(q, k, positions)
  bool bias = false;         ///< bias(positions) added to the scaled scores
  bool score_terms = false;  ///< score_terms(q, k, positions) added before the scale
  bool value_terms = false;  ///< value_terms(probs, positions) added to the output
  bool reweight = false;     ///< reweight(scores, positions) before the softmax

  bool acts_in_attention() const { return rotate || bias || score_terms || value_terms || reweight; }
  /// Only rotations and additive biases fit the fused scaled_dot_product_attention
  /// (LibTorch 2.x); score/value terms and reweighting need the explicit scores.
  bool fits_fused_attention() const { return !(score_terms || value_terms || reweight); }
  /// Names of the hooks in use, in call order ("embed", "rotate", ...): for list and inspect.
  std::vector<std::string> hook_names() const {
    std::vector<std::string> names;
    const std::pair<bool, const char*> hooks[] = {{embed, "embed"},
                                                  {rotate, "rotate"},
                                                  {bias, "bias"},
                                                  {score_terms, "score_terms"},
                                                  {value_terms, "value_terms"},
                                                  {reweight, "reweight"}};
    for (const auto& [used, name] : hooks)
      if (used) names.push_back(name);
    return names;
  }

  static Capabilities embedding() { return with(&Capabilities::embed); }
  static Capabilities rotation() { return with(&Capabilities::rotate); }
  static Capabilities additive_bias() { return with(&Capabilities::bias); }
  static Capabilities score_reweighting() { return with(&Capabilities::reweight); }

 private:
  static Capabilities with(bool Capabilities::*hook) {
    Capabilities c;
    c.*hook = true;
    return c;
  }
};

/// Memo for values computed once per forward pass (biases, cos/sin tables),
/// shared by all layers that hold the same scheme instance.
using ForwardCache = std::unordered_map<std::string, torch::Tensor>;

/// Position ids of queries and keys for one forward pass.
struct Positions {
  torch::Tensor q;  ///< (Lq) int64
  torch::Tensor k;  ///< (Lk) int64
  int64_t end = 0;  ///< one past the largest id, known on the host (bounds checks without a device sync)
  ForwardCache* cache = nullptr;
  /// (B, Lk) bool, true at keys that are padding (a shorter source in a batch
  /// of an encoder_decoder): attention gives them no weight. Undefined: none.
  torch::Tensor key_padding;
  /// (B, Lq) and (B, Lk) int64: the ids a task defines (TaskBatch::positions),
  /// set where an attention scheme reads them; a bias is then over these ids
  /// (bias_offsets, relative_offsets.h), while q and k, and so the causal mask, still
  /// count 0..L-1. Undefined: none.
  torch::Tensor task_q, task_k;
  int64_t task_end = 0;  ///< one past the largest task id (where task_q is set), known on the host
};

class PositionalSchemeImpl : public torch::nn::Module {
 public:
  explicit PositionalSchemeImpl(std::string name) : torch::nn::Module(std::move(name)) {}
  ~PositionalSchemeImpl() override = default;

  virtual Capabilities capabilities() const = 0;
  /// Can the scheme tell left from right? Symmetric |i-j| biases cannot.
  virtual bool directional() const = 0;
  /// Does its bias or rotation depend on j - i alone? FIRE's does not past its
  /// threshold (the query position normalizes the distance).
  virtual bool offset_only() const { return true; }
  /// Does a decoder step from a KV cache see what the whole sequence would?
  /// Not where a position's encoding depends on the sequence's length (xPos's
  /// centre, dynamic NTK, APE's and the dynamic embedding's length scale) or
  /// on the square score matrix (CoPE's counts): the decoder then reruns the
  /// whole sequence per new token. tests/test_decoder.cpp holds every scheme that says yes to it.
  virtual bool supports_kv_cache() const { return true; }
  /// Does the scheme relate a query to the keys of its own sequence (CoPE's counts,
  /// FoX's gates between query and key)? Then cross-attention, whose keys are another
  /// sequence's, refuses it when the model is built.
  virtual bool self_attention_only() const { return false; }
  /// Can a CUDA graph capture a forward and backward through this scheme
  /// (train.cuda_graphs)? Not where its work is decided on the host from each
  /// batch's data rather than from the batch's shape; tests/test_cuda_graphs.cpp
  /// holds every scheme that says yes to graphed and eager training agreeing.
  virtual bool capturable() const { return true; }
  /// Largest number of positions the scheme can encode (0 = unbounded).
  virtual int64_t max_positions() const { return 0; }
  /// True where positions the model never saw in training have untrained parameters.
  virtual bool has_position_table() const { return false; }

  /// FLOPs the scheme adds to one attention layer's forward over (B, H, Lq, Lk, Dh)
  /// beyond q·k and p·v, and to one embed() over (B, L, D); `posenc bench` counts them.
  virtual double attention_flops(int64_t /*B*/, int64_t /*H*/, int64_t /*Lq*/, int64_t /*Lk*/, int64_t /*Dh*/) const {
    return 0;
  }
  virtual double embed_flops(int64_t /*B*/, int64_t /*L*/, int64_t /*D*/) const { return 0; }

  /// (B, L, D) -> (B, L, D)
  virtual torch::Tensor embed(const torch::Tensor& x, const Positions& /*pos*/) { return x; }
  /// q (B, H, Lq, Dh), k (B, H, Lk, Dh), rotated in place of the handles.
  virtual void rotate(torch::Tensor& /*q*/, torch::Tensor& /*k*/, const Positions& /*pos*/) {}
  /// (1 or B, H, Lq, Lk), added after the 1/sqrt(Dh) scale.
  virtual torch::Tensor bias(const Positions& /*pos*/) { return {}; }
  /// (B, H, Lq, Lk), added to q·k before the 1/sqrt(Dh) scale. `qk` is q·kᵀ (B, H, Lq, Lk),
  /// already computed by attention, for terms that depend on the content scores (CoPE's gates).
  virtual torch::Tensor score_terms(const torch::Tensor& /*q*/, const torch::Tensor& /*k*/, const torch::Tensor& /*qk*/,
                                    const Positions& /*pos*/) {
    return {};
  }
  /// probs (B, H, Lq, Lk) -> (B, H, Lq, Dh), added to probs·v.
  virtual torch::Tensor value_terms(const torch::Tensor& /*probs*/, const Positions& /*pos*/) { return {}; }
  /// scores (B, H, Lq, Lk) -> (B, H, Lq, Lk), before the softmax.
  virtual torch::Tensor reweight(const torch::Tensor& scores, const Positions& /*pos*/) { return scores; }

 protected:
  /// Computes `make()` once per forward pass for this instance and key. A value
  /// made to match a tensor (its device and dtype: a table for x under autocast,
  /// say) passes it as `like`, and is kept apart for each device and dtype.
  template <typename F>
  torch::Tensor once_per_forward(const Positions& pos, const char* key, F&& make,
                                 const torch::Tensor& like = torch::Tensor()) {
    if (pos.cache == nullptr) return make();
    std::string id = std::to_string(reinterpret_cast<std::uintptr_t>(this)) + key;
    if (like.defined()) id += std::string("/") + c10::toString(like.scalar_type()) + "/" + like.device().str();
    auto it = pos.cache->find(id);
    if (it != pos.cache->end()) return it->second;
    torch::Tensor value = make();
    pos.cache->emplace(id, value);
    return value;
  }
};

using PositionalScheme = std::shared_ptr<PositionalSchemeImpl>;

/// A registry entry's factory for a scheme class constructed from (context, options).
template <typename Impl>
PositionalScheme construct(const SchemeContext& ctx, const SchemeOptions& options) {
  return std::make_shared<Impl>(ctx, options);
}

}  // namespace posenc
