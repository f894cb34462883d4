// Small robust statistics used by the doctor and the report. Pure functions.
#ifndef INFRARSI_MODELS_STATS_H_
#define INFRARSI_MODELS_STATS_H_

#include <vector>

namespace infrarsi::models {

// Median of `xs`; 0 for an empty input.
double Median(std::vector<double> xs);
// Arithmetic mean; 0 for an empty input.
double Mean(const std::vector<double>& xs);
// Sample standard deviation (n-1); 0 for fewer than two values.
double SampleStdDev(const std::vector<double>& xs);
// Coefficient of variation: sample stddev / mean; 0 when undefined.
double CoefficientOfVariation(const std::vector<double>& xs);
// Pearson correlation of xs and ys (same length); 0 when either is
// constant or there are fewer than two pairs.
double Correlation(const std::vector<double>& xs, const std::vector<double>& ys);

}  // namespace infrarsi::models

#endif  // INFRARSI_MODELS_STATS_H_
