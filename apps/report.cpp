#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include <kformer/core/file_io.hpp>

namespace kformer::app {

MetricsLog::MetricsLog(std::string directory) : directory_(std::move(directory)) {}

void MetricsLog::add(const EpochRecord& record) {
  records_.push_back(record);
}

void MetricsLog::resume(const std::string& run, int epochs) {
  std::ifstream in(directory_ + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.value("run", "") != run) continue;
    EpochRecord r;
    r.run = run;
    r.epoch = j.value("epoch", 0);
    if (r.epoch < 1 || r.epoch > epochs) continue;
    r.train_loss = j.value("train_loss", 0.0);
    r.validation_loss = j.value("validation_loss", 0.0);
    r.lr = j.value("lr", 0.0);
    r.seconds = j.value("seconds", 0.0);
    for (const char* metric : {"accuracy", "rmse", "masked_mse"})
      if (j.contains(metric)) {
        r.metric_name = metric;
        r.validation_metric = j.value(metric, 0.0);
      }
    records_.push_back(r);
  }
}

std::vector<EpochRecord> MetricsLog::records_of(const std::string& run) const {
  std::vector<EpochRecord> out;
  for (const auto& r : records_)
    if (r.run == run) out.push_back(r);
  return out;
}

void MetricsLog::write() const {
  std::ostringstream jsonl, csv;
  csv.precision(8);
  csv << "run,epoch,train_loss,validation_loss,metric,value,lr,seconds\n";
  for (const auto& r : records_) {
    jsonl << nlohmann::json{{"run", r.run},
                            {"epoch", r.epoch},
                            {"train_loss", r.train_loss},
                            {"validation_loss", r.validation_loss},
                            {r.metric_name, r.validation_metric},
                            {"lr", r.lr},
                            {"seconds", r.seconds}}
                 .dump()
          << '\n';
    csv << r.run << ',' << r.epoch << ',' << r.train_loss << ',' << r.validation_loss << ','
        << r.metric_name << ',' << r.validation_metric << ',' << r.lr << ',' << r.seconds << '\n';
  }
  write_file_atomic(directory_ + "/metrics.jsonl", jsonl.str());
  write_file_atomic(directory_ + "/metrics.csv", csv.str());
}

std::string MetricsLog::plot_loss_curves(const std::vector<std::string>& only) const {
  std::vector<std::string> runs;
  for (const auto& r : records_)
    if ((runs.empty() || runs.back() != r.run) &&
        (only.empty() || std::find(only.begin(), only.end(), r.run) != only.end()))
      runs.push_back(r.run);
  std::ostringstream gp;
  gp << "# Loss curves of the runs in metrics.csv (written by kformer; run: gnuplot "
        "loss_curves.gp)\n"
     // noenhanced: run names such as from_scratch are printed as written (no subscripts).
     << "set terminal pngcairo noenhanced size 960,600 font 'sans,11'\n"
     << "set output '" << directory_ << "/loss_curves.png'\n"
     << "set datafile separator ','\n"
     << "set title 'kformer training: loss per epoch'\n"
     // The legend below the plot, in rows, so that it covers no curve and leaves the plot its
     // width.
     << "set xlabel 'epoch'\nset ylabel 'loss (log scale)'\nset logscale y\nset grid\n"
     << "set key below horizontal maxcols 2\n"
     << "plot ";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::string filter = "(strcol(1) eq '" + runs[i] + "' ? ";
    gp << (i ? ", \\\n     " : "") << "'" << directory_ << "/metrics.csv' using 2:" << filter
       << "$3 : NaN) with linespoints linecolor " << i + 1 << " title '" << runs[i]
       << " train', '' using 2:" << filter << "$4 : NaN) with lines dashtype 2 linecolor " << i + 1
       << " title '" << runs[i] << " validation'";  // one colour per run, dashed: validation
  }
  gp << "\n";
  const std::string script = directory_ + "/loss_curves.gp";
  write_file_atomic(script, gp.str());
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    std::fprintf(
        stderr, "kformer: gnuplot not found; the loss curves can be drawn later with: gnuplot %s\n",
        script.c_str());
    return {};
  }
  const std::string command = "gnuplot '" + script + "' 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "kformer: gnuplot failed on %s\n", script.c_str());
    return {};
  }
  return directory_ + "/loss_curves.png";
}

}  // namespace kformer::app
