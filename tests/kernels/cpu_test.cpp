// kernels/cpu.hpp: the level chosen from CPU features and GEMMA4_ISA, on synthetic features (so
// every branch runs on any machine), and on this machine.
#include <catch2/catch.hpp>

#include <gemma4/kernels/cpu.hpp>
#include <gemma4/kernels/linear.hpp>

#include <string>

using namespace gemma4;

namespace {

CpuFeatures avx2_cpu() {
    CpuFeatures f;
    f.os_avx = f.avx2 = f.fma = f.f16c = true;
    return f;
}

CpuFeatures avx512_cpu() {
    CpuFeatures f = avx2_cpu();
    f.os_avx512 = f.avx512f = f.avx512bw = f.avx512vl = f.avx512vnni = true;
    return f;
}

CpuFeatures amx_cpu() {
    CpuFeatures f = avx512_cpu();
    f.os_amx = f.amx_tile = f.amx_int8 = true;
    return f;
}

auto granted = [] { return true; };
auto refused = [] { return false; };

std::string message_of(const CpuFeatures& f, const char* cap) {
    try {
        detail::make_isa_report(f, cap, granted);
    } catch (const InvalidArgument& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST_CASE("the level is the highest the features allow", "[kernels][cpu]") {
    CHECK(detail::level_of(CpuFeatures{}) == Isa::Baseline);
    CHECK(detail::level_of(avx2_cpu()) == Isa::Avx2);
    CHECK(detail::level_of(avx512_cpu()) == Isa::Avx512);
    CHECK(detail::level_of(amx_cpu()) == Isa::Amx);
    // each level needs all of its features and the OS's consent to its registers
    CpuFeatures no_fma = avx2_cpu();
    no_fma.fma = false;
    CHECK(detail::level_of(no_fma) == Isa::Baseline);
    CpuFeatures no_os_zmm = avx512_cpu();
    no_os_zmm.os_avx512 = false;
    CHECK(detail::level_of(no_os_zmm) == Isa::Avx2);
    CpuFeatures no_vnni = avx512_cpu();  // AVX-512 without VNNI (Skylake-X) runs the AVX2 level
    no_vnni.avx512vnni = false;
    CHECK(detail::level_of(no_vnni) == Isa::Avx2);
    CpuFeatures tiles_not_saved = amx_cpu();
    tiles_not_saved.os_amx = false;
    CHECK(detail::level_of(tiles_not_saved) == Isa::Avx512);
}

TEST_CASE("GEMMA4_ISA caps the level", "[kernels][cpu]") {
    for (const char* cap : {"baseline", "avx2", "avx512", "amx"}) {
        const IsaReport r = detail::make_isa_report(amx_cpu(), cap, granted);
        CHECK(isa_name(r.active) == cap);
        CHECK(r.cpu == Isa::Amx);
        CHECK(r.cap == cap);
        CHECK(r.note.empty());
    }
    // unset or empty: the CPU's level
    CHECK(detail::make_isa_report(avx512_cpu(), nullptr, granted).active == Isa::Avx512);
    CHECK(detail::make_isa_report(avx512_cpu(), "", granted).active == Isa::Avx512);
}

TEST_CASE("a level the CPU lacks or an unknown GEMMA4_ISA is an error naming it", "[kernels][cpu]") {
    CHECK(message_of(avx2_cpu(), "avx512") ==
          "GEMMA4_ISA=avx512: this CPU cannot run that level (missing: avx512(os) avx512f avx512bw avx512vl avx512_vnni)");
    CHECK(message_of(CpuFeatures{}, "avx2") == "GEMMA4_ISA=avx2: this CPU cannot run that level (missing: avx(os) avx2 fma f16c)");
    CHECK(message_of(avx512_cpu(), "amx") == "GEMMA4_ISA=amx: this CPU cannot run that level (missing: amx(os) amx_tile amx_int8)");
    CHECK(message_of(amx_cpu(), "AVX2") == "GEMMA4_ISA: unknown level 'AVX2' (expected baseline, avx2, avx512 or amx)");
    CHECK(message_of(amx_cpu(), "native") == "GEMMA4_ISA: unknown level 'native' (expected baseline, avx2, avx512 or amx)");
}

TEST_CASE("GEMMA4_AVXVNNI=0 takes AVX-VNNI from the kernels' features", "[kernels][cpu]") {
    CpuFeatures f = avx2_cpu();
    f.avx_vnni = true;
    CHECK(detail::make_isa_report(f, nullptr, granted, nullptr).features.avx_vnni);
    CHECK(detail::make_isa_report(f, nullptr, granted, "1").features.avx_vnni);
    CHECK_FALSE(detail::make_isa_report(f, nullptr, granted, "0").features.avx_vnni);
    CHECK(detail::quant_kernel_for(Isa::Avx2, detail::make_isa_report(f, nullptr, granted, "0").features) == detail::QuantKernel::Avx2);
    CHECK_THROWS_WITH(detail::make_isa_report(f, nullptr, granted, "no"), "GEMMA4_AVXVNNI: expected 0 or 1, got 'no'");
}

TEST_CASE("AMX refused by the OS falls back to avx512 and says so", "[kernels][cpu]") {
    for (const char* cap : {static_cast<const char*>(nullptr), "amx"}) {
        const IsaReport r = detail::make_isa_report(amx_cpu(), cap, refused);
        CHECK(r.cpu == Isa::Amx);
        CHECK(r.active == Isa::Avx512);
        CHECK(r.note == "the OS refused the AMX tile state (arch_prctl); running avx512");
    }
    // below amx the OS is not asked
    bool asked = false;
    detail::make_isa_report(amx_cpu(), "avx512", [&] { return asked = true; });
    CHECK_FALSE(asked);
}

TEST_CASE("this process runs at the level its report names", "[kernels][cpu]") {
    const IsaReport& r = isa_report();
    CHECK(active_isa() == r.active);
    CHECK(r.active <= r.cpu);
    CHECK(r.cpu == detail::level_of(cpu_features()));
    const KernelChoice k = active_kernels();
    CHECK(k.quant == detail::quant_kernel_name(detail::quant_kernel_for(r.active, r.features)));
    if (r.active >= Isa::Avx512) CHECK(k.bf16 == "avx512");
    if (r.active == Isa::Avx2) CHECK(k.bf16 == "avx2");
    if (r.active == Isa::Baseline) CHECK(k.bf16.rfind("xsimd-", 0) == 0);
}
