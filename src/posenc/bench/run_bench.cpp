// posenc bench: per case the C++ side and the PyTorch-eager worker in turn
// (twice each), then one table with both.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "posenc/bench/bench.h"
#include "posenc/bench/python_worker.h"
#include "posenc/util/python.h"

namespace posenc {
namespace fs = std::filesystem;

namespace {

/// Cases small enough to export their weights for the parity check.
bool parity_case(const BenchResult& r) { return r.parameters <= 2'000'000; }

std::string table(const std::vector<BenchCase>& cases, const json& rows, double peak) {
  std::ostringstream out;
  out << fmt::format("{:<6} {:<18} {:<9} {:>9} {:>9} {:>8} {:>10} {:>8} {:>8} {:>8} {:>8} {:>6} {:>9} {:>7} {:>9}\n",
                     "size", "scheme", "qkv", "params", "train ms", "steps/s", "tokens/s", "eval ms", "peak MB",
                     "GFLOP", "GFLOP/s", "%peak", "py ms", "C++/py", "|dloss|");
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const json& r = rows[i];
    if (!c.skipped.empty()) continue;
    std::string py_ms = "-", ratio = "-", dloss = "-";
    if (r.contains("python")) {
      const json& p = r["python"];
      py_ms = fmt::format("{:.2f}", p["train_ms"].get<double>());
      ratio = fmt::format("{:.2f}x", p["train_ms"].get<double>() / r["train_ms"].get<double>());
      if (p.contains("parity_abs_diff")) dloss = fmt::format("{:.1e}", p["parity_abs_diff"].get<double>());
    }
    out << fmt::format(
        "{:<6} {:<18} {:<9} {:>9} {:>9.2f} {:>8.1f} {:>10.0f} {:>8.2f} {:>8.0f} {:>8.2f} {:>8.1f} {:>5.0f}% {:>9} {:>7} {:>9}\n",
        c.size, c.scheme, c.qkv, r["parameters"].get<int64_t>(), r["train_ms"].get<double>(),
        1000.0 / r["train_ms"].get<double>(), r["tokens_per_s"].get<double>(), r["eval_ms"].get<double>(),
        r["peak_mb"].get<double>(), r["flops_per_step"].get<double>() / 1e9, r["gflops_per_s"].get<double>(),
        100.0 * r["gflops_per_s"].get<double>() / peak, py_ms, ratio, dloss);
  }
  return out.str();
}

}  // namespace

int run_benchmark(const BenchOptions& o) {
  const auto cases = plan_bench(o.config, o.sizes, o.schemes, o.threads, o.device);
  fs::create_directories(o.out);

  // The PyTorch side runs in one worker process, alternated with the C++ side case by case.
  std::unique_ptr<PythonWorker> worker;
  std::string python_note;
  if (o.python) {
    const std::string script = find_script("bench_eager.py");
    const std::string python = find_python("torch");
    if (o.device != "cpu") python_note = "PyTorch side skipped: scripts/bench_eager.py times the CPU only";
    else if (script.empty()) python_note = "PyTorch side skipped: scripts/bench_eager.py not found (set POSENC_SCRIPTS)";
    else if (python.empty()) python_note = "PyTorch side skipped: no python3 with torch (sudo apt-get install python3-torch)";
    else worker = std::make_unique<PythonWorker>(python, script);
  }
  const int rounds = worker ? 2 : 1;  // C++, PyTorch, C++, PyTorch: each side keeps its faster median

  const double peak = matmul_peak_gflops(o.device);
  spdlog::info("bench {}: {} cases on {}, {} thread(s){}; matrix-product peak {:.1f} GFLOP/s", o.config, cases.size(),
               o.device, o.threads, o.bf16 ? ", bf16 autocast" : "", peak);

  json rows = json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    json row = bench_case_json(c);
    row.erase("config");
    if (!c.skipped.empty()) {
      row["skipped"] = c.skipped;
      rows.push_back(row);
      spdlog::info("{} {} {}: not run ({})", c.size, c.scheme, c.qkv, c.skipped);
      continue;
    }
    json request = {{"threads", o.threads}, {"bf16", o.bf16}, {"case", bench_case_json(c)}};
    request["case"]["index"] = i;
    BenchResult r;
    json py;
    for (int round = 0; round < rounds; ++round) {
      const BenchResult now = run_bench_case(c, o.bf16);
      if (round == 0 || now.train_ms < r.train_ms) r = now;
      if (!worker) continue;
      if (round == 0 && parity_case(r)) {
        const std::string dir = (fs::path(o.out) / "parity" / fmt::format("{}-{}-{}", c.size, c.scheme, c.qkv)).string();
        export_bench_case(c, dir);
        request["case"]["parity_dir"] = dir;
      }
      json answer = worker->ask(request);
      if (round == 0 || answer["train_ms"].get<double>() < py["train_ms"].get<double>()) {
        for (const auto& key : {"parity_cpp_loss", "parity_python_loss", "parity_abs_diff", "parity_ok"})
          if (round > 0 && py.contains(key)) answer[key] = py[key];
        py = answer;
      }
      request["case"].erase("parity_dir");
    }
    row.update({{"parameters", r.parameters},
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
                {"initial_loss", r.initial_loss}});
    if (worker) row["python"] = py;
    rows.push_back(row);
    spdlog::info("{} {} {}: train {:.2f} ms/step (forward {:.2f}, backward {:.2f}, clip+AdamW {:.2f}; {:.1f} GFLOP/s, "
                 "{:.0f}% of peak), eval {:.2f} ms{}",
                 c.size, c.scheme, c.qkv, r.train_ms, r.forward_ms, r.backward_ms, r.optimizer_ms, r.gflops_per_s,
                 100 * r.gflops_per_s / peak, r.eval_ms,
                 worker ? fmt::format("; PyTorch eager {:.2f} ms/step", py["train_ms"].get<double>()) : "");
  }
  worker.reset();

  const std::string text = table(cases, rows, peak);
  std::printf("\n%s", text.c_str());
  std::printf("matrix-product peak (%s, %lld thread(s)): %.1f GFLOP/s; GFLOP = per training step (3 x forward); "
              "C++/py = PyTorch-eager step time / C++ step time\n",
              o.device.c_str(), static_cast<long long>(o.threads), peak);
  std::fflush(stdout);
  if (!python_note.empty()) spdlog::warn("{}", python_note);
  write_file_atomic((fs::path(o.out) / "bench.json").string(),
                    json{{"config", o.config}, {"device", o.device}, {"threads", o.threads}, {"bf16", o.bf16},
                         {"matmul_peak_gflops", peak}, {"cases", rows}}.dump(2) + "\n");
  write_file_atomic((fs::path(o.out) / "bench.txt").string(), text);
  spdlog::info("wrote {}/bench.json", o.out);
  // Parity failures are errors: the two sides must compute the same function.
  for (const auto& r : rows)
    if (r.contains("python") && r["python"].value("parity_ok", true) == false) {
      spdlog::error("parity: {} {} {}: C++ loss {} vs PyTorch {}", r["size"].get<std::string>(), r["scheme"].get<std::string>(),
                    r["qkv"].get<std::string>(), r["python"]["parity_cpp_loss"].dump(), r["python"]["parity_python_loss"].dump());
      return 1;
    }
  return 0;
}

}  // namespace posenc
