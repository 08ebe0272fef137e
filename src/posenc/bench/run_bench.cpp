// posenc bench: per case the C++ side and the PyTorch-eager worker in turn
// (twice each), then one table with both.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "posenc/bench/bench.h"
#include "posenc/bench/python_worker.h"
#include "posenc/train/run_dir.h"
#include "posenc/util/interrupt.h"
#include "posenc/util/python.h"
#include "posenc/util/text.h"
#include "posenc/util/io.h"
#include "posenc/util/output_guard.h"

namespace posenc {
namespace fs = std::filesystem;

namespace {

/// Cases small enough to export their weights for the parity check.
bool parity_case(const BenchResult& r) { return r.parameters <= 2'000'000; }

/// The result table as cells, header first (shared by the text and Markdown renderings).
Table table_cells(const std::vector<BenchCase>& cases, const json& rows, double peak) {
  Table out = {{"size", "scheme", "qkv", "params", "train ms", "x none", "fwd/bwd/opt ms", "tokens/s", "eval ms",
                "peak MB", "GFLOP", "GFLOP/s", "% peak", "py ms", "C++/py", "|Δloss|", "graph ms", "py/graph",
                "compiled py ms"}};
  // Step time of `none` at the same size and qkv: the positional overhead.
  const auto none_ms = [&](const BenchCase& c) -> double {
    for (size_t j = 0; j < cases.size(); ++j)
      if (cases[j].size == c.size && cases[j].qkv == c.qkv && cases[j].config.model.positional.type == "none" &&
          cases[j].skipped.empty())
        return rows[j]["train_ms"].get<double>();
    return 0;
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const json& r = rows[i];
    if (!c.skipped.empty()) continue;
    const double ms = r["train_ms"].get<double>(), base = none_ms(c);
    std::string py_ms = "-", ratio = "-", dloss = "-", graph_ms = "-", graph_ratio = "-", compiled = "-";
    const double graphed = r.value("graph_ms", 0.0);
    if (graphed > 0) graph_ms = fmt::format("{:.3f}", graphed);
    if (r.contains("python")) {
      const json& p = r["python"];
      py_ms = fmt::format("{:.2f}", p["train_ms"].get<double>());
      ratio = fmt::format("{:.2f}x", p["train_ms"].get<double>() / ms);
      if (p.contains("parity_abs_diff")) dloss = fmt::format("{:.1e}", p["parity_abs_diff"].get<double>());
      if (graphed > 0) graph_ratio = fmt::format("{:.2f}x", p["train_ms"].get<double>() / graphed);
      if (p.contains("compile_ms")) compiled = fmt::format("{:.3f}", p["compile_ms"].get<double>());
    }
    out.push_back({c.size, c.scheme, c.qkv, std::to_string(r["parameters"].get<int64_t>()), fmt::format("{:.2f}", ms),
                   base > 0 ? fmt::format("{:.2f}", ms / base) : "-",
                   fmt::format("{:.1f}/{:.1f}/{:.1f}", r["forward_ms"].get<double>(), r["backward_ms"].get<double>(),
                               r["optimizer_ms"].get<double>()),
                   fmt::format("{:.0f}", r["tokens_per_s"].get<double>()),
                   fmt::format("{:.2f}", r["eval_ms"].get<double>()), fmt::format("{:.0f}", r["peak_mb"].get<double>()),
                   fmt::format("{:.2f}", r["flops_per_step"].get<double>() / 1e9),
                   fmt::format("{:.1f}", r["gflops_per_s"].get<double>()),
                   fmt::format("{:.0f}%", 100.0 * r["gflops_per_s"].get<double>() / peak), py_ms, ratio, dloss,
                   graph_ms, graph_ratio, compiled});
  }
  return out;
}

/// The PyTorch side, one worker process for the whole bench, or nothing (and why) when it cannot run.
std::unique_ptr<PythonWorker> start_python_worker(const BenchOptions& o, std::string& note) {
  if (!o.python) return nullptr;
  check_posenc_python("torch");
  const std::string script = find_script("bench_eager.py");
  const std::string python = find_python("torch");
  if (script.empty()) {
    note = "PyTorch side skipped: scripts/bench_eager.py not found (set POSENC_SCRIPTS)";
    return nullptr;
  }
  if (python.empty()) {
    note = "PyTorch side skipped: no python3 with torch (sudo apt-get install python3-torch)";
    return nullptr;
  }
  return std::make_unique<PythonWorker>(python, script);
}

/// Logs bench's stop line ("bench stopped by SIGTERM after 2 of 9 cases: ...") and returns what to throw.
Interrupted bench_stopped(int signal, size_t done, size_t total, const std::string& out) {
  spdlog::info("bench stopped by {} after {} of {} cases: no results written to {}", signal_name(signal), done, total,
               out);
  return Interrupted(signal);
}

/// Both sides' timings of one case.
struct TimedCase {
  BenchResult cpp;
  json python;  ///< the worker's answer; null when the PyTorch side did not run this case
};

/// Times case i: C++, PyTorch, C++, PyTorch (two rounds when the worker runs); each side keeps its faster median.
/// The first round also exports the weights of a small encoder case for the loss-parity check.
TimedCase time_case(const BenchOptions& o, const std::vector<BenchCase>& cases, size_t i, PythonWorker* worker) {
  const auto& c = cases[i];
  const bool explicit_attention = o.attention == "explicit";
  // The PyTorch twin is the encoder classifier; a decoder case is timed on the C++ side only.
  const bool with_python = worker && c.config.model.kind == ModelKind::Encoder;
  json request = {{"threads", o.threads},
                  {"bf16", o.bf16},
                  {"explicit_attention", explicit_attention},
                  {"case", bench_case_json(c)}};
  request["case"]["index"] = i;
  TimedCase t;
  const int rounds = worker ? 2 : 1;
  for (int round = 0; round < rounds; ++round) {
    throw_if_interrupted();
    const BenchResult now = run_bench_case(c, o.bf16, explicit_attention);
    if (round == 0 || now.train_ms < t.cpp.train_ms) t.cpp = now;
    if (!with_python) continue;
    if (round == 0 && parity_case(t.cpp)) {
      const std::string dir = (fs::path(o.out) / "parity" / fmt::format("{}-{}-{}", c.size, c.scheme, c.qkv)).string();
      export_bench_case(c, dir);
      request["case"]["parity_dir"] = dir;
    }
    json answer = worker->ask(request);
    if (round == 0 || answer["train_ms"].get<double>() < t.python["train_ms"].get<double>()) {
      for (const auto& key : {"parity_cpp_loss", "parity_python_loss", "parity_abs_diff", "parity_ok"})
        if (round > 0 && t.python.contains(key)) answer[key] = t.python[key];
      t.python = answer;
    }
    request["case"].erase("parity_dir");
  }
  return t;
}

/// A case's row of bench.json.
json case_row(const BenchCase& c, const TimedCase& t, double peak) {
  json row = bench_case_json(c);
  row.erase("config");
  if (!c.skipped.empty()) {
    row["skipped"] = c.skipped;
    return row;
  }
  const BenchResult& r = t.cpp;
  row.update(
      {{"parameters", r.parameters},
       {"train_ms", r.train_ms},
       {"train_ms_min", r.train_ms_min},
       {"forward_ms", r.forward_ms},
       {"backward_ms", r.backward_ms},
       {"optimizer_ms", r.optimizer_ms},
       {"eval_ms", r.eval_ms},
       {"tokens_per_s", r.tokens_per_s},
       {"peak_mb", r.peak_mb},
       {"flops_per_step", r.flops_per_step},
       {"gflops_per_s", r.gflops_per_s},
       {"fraction_of_peak", r.gflops_per_s / peak},
       {"initial_loss", r.initial_loss},
       {"graph_ms", r.graph_ms},
       {"graph_fraction_of_peak", r.graph_ms > 0 ? r.flops_per_step / (r.graph_ms / 1000.0) / 1e9 / peak : 0.0}});
  if (!t.python.is_null()) row["python"] = t.python;
  return row;
}

void log_case(const BenchCase& c, const TimedCase& t, double peak) {
  if (!c.skipped.empty()) {
    spdlog::info("{} {} {}: not run ({})", c.size, c.scheme, c.qkv, c.skipped);
    return;
  }
  const BenchResult& r = t.cpp;
  spdlog::info(
      "{} {} {}: train {:.2f} ms/step (forward {:.2f}, backward {:.2f}, clip+AdamW {:.2f}; {:.1f} GFLOP/s, "
      "{:.0f}% of peak), eval {:.2f} ms{}",
      c.size, c.scheme, c.qkv, r.train_ms, r.forward_ms, r.backward_ms, r.optimizer_ms, r.gflops_per_s,
      100 * r.gflops_per_s / peak, r.eval_ms,
      t.python.is_null() ? "" : fmt::format("; PyTorch eager {:.2f} ms/step", t.python["train_ms"].get<double>()));
}

/// Prints the table and writes OUT/bench.json, bench.txt and bench.md.
void write_outputs(const BenchOptions& o, const std::vector<BenchCase>& cases, const json& rows, double peak) {
  const auto cells = table_cells(cases, rows, peak);
  const std::string legend = fmt::format(
      "matrix-product peak ({}, {} thread(s)): {:.1f} GFLOP/s. train ms: median step (forward, backward, clip + "
      "AdamW); "
      "x none: step time relative to `none` at the same size and qkv; GFLOP: per training step (3 x forward); "
      "C++/py: PyTorch-eager step time / C++ step time (each side's faster median of two rounds); |Δloss|: loss "
      "difference on the same initial weights and batch; graph ms: median step replayed from a CUDA graph "
      "(train.cuda_graphs; CUDA builds with -DPOSENC_CUDA=ON only); py/graph: PyTorch-eager step time / graph "
      "step time; compiled py ms: PyTorch with torch.compile(mode=\"reduce-overhead\") (only with "
      "POSENC_BENCH_COMPILE=1 on CUDA). The peak is {}.\n",
      o.device, o.threads, peak, o.bf16 ? "bfloat16's" : "float32's (no TF32)");
  const std::string text = render_text(cells, 3);
  std::printf("\n%s%s", text.c_str(), legend.c_str());
  std::fflush(stdout);
  const json report = {{kWrittenBy, "posenc bench"}, {"config", o.config}, {"device", o.device},
                       {"threads", o.threads},       {"bf16", o.bf16},     {"attention", o.attention},
                       {"matmul_peak_gflops", peak}, {"cases", rows}};
  write_file_atomic((fs::path(o.out) / "bench.json").string(), report.dump(2) + "\n");
  write_file_atomic((fs::path(o.out) / "bench.txt").string(), text + legend);
  write_file_atomic((fs::path(o.out) / "bench.md").string(), render_markdown(cells, 3) + "\n" + legend);
  spdlog::info("wrote {}/bench.json", o.out);
}

/// Parity failures are errors: the two sides must compute the same function. True when all agree.
bool parity_holds(const json& rows) {
  for (const auto& r : rows)
    if (r.contains("python") && r["python"].value("parity_ok", true) == false) {
      spdlog::error("parity: {} {} {}: C++ loss {} vs PyTorch {}", r["size"].get<std::string>(),
                    r["scheme"].get<std::string>(), r["qkv"].get<std::string>(), r["python"]["parity_cpp_loss"].dump(),
                    r["python"]["parity_python_loss"].dump());
      return false;
    }
  return true;
}

/// What bench writes in its --out, and what says a directory is another's.
OutputDirectory bench_outputs() {
  OutputDirectory spec;
  spec.flag = "--out";
  spec.writer = "posenc bench";
  spec.files = {"bench.json", "bench.txt", "bench.md"};
  spec.foreign = run_files::train_run_files();
  spec.foreign.push_back(run_files::kCompareLock);
  spec.ours = [](const fs::path& dir) {
    // Reports written before bench.json carried "written_by" have its other keys.
    return written_by((dir / "bench.json").string(), "posenc bench", [](const json& report) {
      return report.contains("matmul_peak_gflops") && report.contains("cases");
    });
  };
  return spec;
}

}  // namespace

int run_benchmark(const BenchOptions& o) {
  // From the start: a signal during the set-up (the PyTorch worker's start, the
  // matrix-product peak, seconds on a loaded machine) stops it before the first
  // case, with the same line, instead of taking the signal's default action.
  const InterruptGuard stop_cleanly;               // a signal stops between measurements; nothing is written
  check_output_directory(o.out, bench_outputs());  // before the cases are timed, not after
  const auto cases = plan_bench(o.config, o.sizes, o.schemes, o.threads, o.device);
  fs::create_directories(o.out);
  std::string python_note;
  std::unique_ptr<PythonWorker> worker;
  double peak = 0;
  try {
    worker = start_python_worker(o, python_note);
    peak = matmul_peak_gflops(o.device, o.threads, o.bf16);
  } catch (const std::exception&) {
    // The same signal may have ended the Python child that start_python_worker ran, failing it.
    if (const int sig = interrupt_signal()) throw bench_stopped(sig, 0, cases.size(), o.out);
    throw;
  }
  spdlog::info("bench {}: {} cases on {}, {} thread(s){}; matrix-product peak {:.1f} GFLOP/s", o.config, cases.size(),
               o.device, o.threads, o.bf16 ? ", bf16 autocast" : "", peak);
  json rows = json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    TimedCase t;
    try {
      if (cases[i].skipped.empty()) t = time_case(o, cases, i, worker.get());
    } catch (const std::exception&) {
      // A stop, or the PyTorch worker ended by the same signal (it shares the terminal's process group).
      const int sig = interrupt_signal();
      if (sig == 0) throw;
      worker.reset();
      throw bench_stopped(sig, i, cases.size(), o.out);
    }
    log_case(cases[i], t, peak);
    rows.push_back(case_row(cases[i], t, peak));
  }
  worker.reset();
  write_outputs(o, cases, rows, peak);
  if (!python_note.empty()) spdlog::warn("{}", python_note);
  return parity_holds(rows) ? 0 : 1;
}

}  // namespace posenc
