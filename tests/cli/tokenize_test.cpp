// `gemma4 tokenize` / `gemma4 detokenize` run as a user would, on the generated tiny tokenizer.
#include <gemma4/tokenizer/tiny_tokenizer.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

namespace {

// Private to this process: ctest runs the test cases of this file in parallel processes.
const std::filesystem::path kDir = std::filesystem::path(GEMMA4_TEST_TMP_DIR) / ("cli_tokenize." + std::to_string(::getpid()));

std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// Runs the program with `input` on stdin; returns the exit status and fills `out` / `err`.
int run(const std::string& arguments, const std::string& input, std::string& out, std::string& err) {
    std::filesystem::create_directories(kDir);
    std::ofstream(kDir / "stdin", std::ios::binary) << input;
    const std::string command = std::string("\"") + GEMMA4_CLI_PATH + "\" " + arguments + " < \"" + (kDir / "stdin").string() +
                                "\" > \"" + (kDir / "stdout").string() + "\" 2> \"" + (kDir / "stderr").string() + "\"";
    const int status = std::system(command.c_str());
    out = slurp(kDir / "stdout");
    err = slurp(kDir / "stderr");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("gemma4 tokenize / detokenize", "[cli][tokenizer]") {
    const auto info = gemma4::write_tiny_tokenizer(kDir / "tiny", /*add_bos_token=*/true);
    const auto tokenizer = gemma4::Tokenizer::from_file(info.tokenizer_json);
    const std::string flag = "--tokenizer \"" + info.tokenizer_json.string() + "\"";
    std::string out, err;

    const std::string text = "Hello <|turn>user\nnaïve 😀<turn|>\n";
    REQUIRE(run("tokenize " + flag, text, out, err) == 0);
    const auto ids = nlohmann::json::parse(out).get<std::vector<std::int32_t>>();
    CHECK(ids == tokenizer.encode(text));
    CHECK(ids.front() == info.bos);

    REQUIRE(run("detokenize " + flag, out, out, err) == 0);
    CHECK(out == "<bos>" + text);

    REQUIRE(run("tokenize --jsonl " + flag, "{\"text\": \"a b\"}\n{\"text\": \"<|think|>\"}\n", out, err) == 0);
    std::istringstream lines(out);
    std::string first, second;
    std::getline(lines, first);
    std::getline(lines, second);
    CHECK(nlohmann::json::parse(first)["ids"] == nlohmann::json(tokenizer.encode("a b")));
    CHECK(nlohmann::json::parse(second)["ids"] == nlohmann::json(std::vector<std::int32_t>{info.bos, info.think}));

    REQUIRE(run("detokenize --jsonl " + flag, first + "\n" + second + "\n", out, err) == 0);
    CHECK(out == "{\"text\":\"<bos>a b\"}\n{\"text\":\"<bos><|think|>\"}\n");
}

TEST_CASE("gemma4 tokenize / detokenize: errors are one line and exit 1", "[cli][tokenizer]") {
    const auto info = gemma4::write_tiny_tokenizer(kDir / "tiny_errors");
    const std::string flag = "--tokenizer \"" + info.tokenizer_json.string() + "\"";
    std::string out, err;
    CHECK(run("tokenize --tokenizer /nonexistent.json", "x", out, err) == 1);
    CHECK(err.find("cannot open") != std::string::npos);
    CHECK(run("tokenize " + flag, "bad \xFF byte", out, err) == 1);
    CHECK(err.find("byte offset 4") != std::string::npos);
    CHECK(run("tokenize --jsonl " + flag, "{\"txt\": 1}\n", out, err) == 1);
    CHECK(err.find("stdin line 1") != std::string::npos);
    CHECK(run("detokenize " + flag, "[1, 999999]", out, err) == 1);
    CHECK(err.find("id 999999") != std::string::npos);
    CHECK(run("detokenize " + flag, "[1, \"x\"]", out, err) == 1);
    CHECK(err.find("element 1") != std::string::npos);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
}
