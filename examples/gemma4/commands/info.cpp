// gemma4 info: this machine's instruction-set level and the kernels chosen for it, why, and how
// the program was built. --json prints one JSON object.
#include "../cli.hpp"

#include <gemma4/kernels/linear.hpp>
#include <gemma4/version.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>

namespace cmd_info {

using namespace gemma4;

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown";
}

nlohmann::json features_json(const CpuFeatures& f) {
    return {{"avx2", f.avx2},         {"fma", f.fma},           {"f16c", f.f16c},
            {"avx_vnni", f.avx_vnni}, {"avx512f", f.avx512f},   {"avx512bw", f.avx512bw},
            {"avx512vl", f.avx512vl}, {"avx512_vnni", f.avx512vnni}, {"avx512_bf16", f.avx512bf16},
            {"amx_tile", f.amx_tile}, {"amx_int8", f.amx_int8}, {"os_avx", f.os_avx},
            {"os_avx512", f.os_avx512}, {"os_amx", f.os_amx}, {"amd", f.amd}};
}

int run(cli::Args& args) {
    const bool json = args.flag("json");
    args.finish();
    const IsaReport& r = isa_report();
    const KernelChoice k = active_kernels();
    nlohmann::json j{{"version", kVersion},
                     {"cpu", cpu_model()},
                     {"isa_cpu", isa_name(r.cpu)},
                     {"isa", isa_name(r.active)},
                     {"isa_cap", r.cap},
                     {"note", r.note},
                     {"kernels", {{"linear_q8_q4", k.quant}, {"linear_bf16", k.bf16}, {"attention", k.attention}}},
                     {"build_abi", abi_name()},
                     {"features", features_json(r.features)}};
    if (json) {
        std::printf("%s\n", j.dump().c_str());
        return 0;
    }
    std::printf("gemma4 %s\n", kVersion);
    std::printf("cpu          %s\n", j["cpu"].get<std::string>().c_str());
    std::printf("level        %s (this CPU: %s%s)\n", j["isa"].get<std::string>().c_str(), j["isa_cpu"].get<std::string>().c_str(),
                r.cap.empty() ? "" : (", capped by GEMMA4_ISA=" + r.cap).c_str());
    if (!r.note.empty()) std::printf("note         %s\n", r.note.c_str());
    std::printf("kernels      q8/q4 linear: %s, bf16 linear: %s, attention: %s\n", k.quant.c_str(), k.bf16.c_str(), k.attention.c_str());
    std::printf("built for    %s (generic code; the kernels above are chosen at run time)\n", abi_name());
    std::string have;
    for (const auto& [name, on] : j["features"].items())
        if (on.get<bool>()) have += (have.empty() ? "" : " ") + name;
    std::printf("features     %s\n", have.c_str());
    return 0;
}

const cli::Command reg{"info", "this machine's instruction-set level and the kernels chosen for it",
                       cli::Options{{"json", "", "print one JSON object on stdout"}}, run};

}  // namespace cmd_info
