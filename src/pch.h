// Precompiled header: the heavy, stable headers every translation unit uses.
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
