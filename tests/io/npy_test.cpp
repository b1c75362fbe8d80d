#include <catch2/catch.hpp>

#include <gemma4/io/npy.hpp>

#include "support/temp_dir.hpp"

#include <fstream>

using namespace gemma4;

TEST_CASE(".npy round trip and errors", "[io][npy]") {
    const auto dir = test::temp_dir("npy");
    const std::vector<float> f = {1, 2, 3, 4, 5, 6};
    const std::int64_t shape[2] = {2, 3};
    write_npy<float>(dir / "f.npy", f, shape);
    const auto back = read_npy<float>(dir / "f.npy");
    CHECK(back.shape == std::vector<std::int64_t>{2, 3});
    CHECK(back.data == f);
    // The header is a multiple of 64 bytes, as NumPy writes it.
    CHECK((std::filesystem::file_size(dir / "f.npy") - f.size() * 4) % 64 == 0);

    const std::vector<std::int32_t> i = {7, -8};
    const std::int64_t shape1[1] = {2};
    write_npy<std::int32_t>(dir / "i.npy", i, shape1);
    CHECK(read_npy<std::int32_t>(dir / "i.npy").data == i);

    REQUIRE_THROWS_AS(read_npy<double>(dir / "f.npy"), FormatError);
    REQUIRE_THROWS_WITH(read_npy<double>(dir / "f.npy"), Catch::Contains(".npy dtype is '<f4', expected '<f8'"));
    std::filesystem::resize_file(dir / "f.npy", std::filesystem::file_size(dir / "f.npy") - 4);
    REQUIRE_THROWS_WITH(read_npy<float>(dir / "f.npy"), Catch::Contains("needs 24"));
    std::ofstream(dir / "bad.npy") << "hello";
    REQUIRE_THROWS_WITH(read_npy<float>(dir / "bad.npy"), Catch::Contains("not a .npy file"));
}
