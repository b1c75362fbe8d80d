// The official `openai` npm client against the server (tests/server/openai_client.mjs). The
// package is installed into a scratch folder of the build tree with npm; without node, npm or
// the registry the test is reported as skipped.
#include <catch2/catch.hpp>

#include "server_process.hpp"
#include "support/skip.hpp"

#include <cstdlib>

using namespace gemma4::test;

TEST_CASE("the openai npm client: chat, streaming, usage, stop, tools, images, sampling fields, an alias, typed errors", "[server][e2e][openai]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    if (std::system("command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1") != 0) GEMMA4_SKIP("node or npm not installed");
    const std::filesystem::path dir = std::filesystem::path(GEMMA4_BUILD_DIR) / "openai-client";
    std::filesystem::create_directories(dir);
    if (!std::filesystem::exists(dir / "node_modules" / "openai" / "package.json")) {
        const auto log = dir / "npm-install.log";
        const std::string install = "cd '" + dir.string() + "' && timeout 300 npm install --no-audit --no-fund --loglevel=error openai@4 >'" +
                                    log.string() + "' 2>&1";
        if (std::system(install.c_str()) != 0) GEMMA4_SKIP("npm install openai failed (no registry?): " << read_text(log));
    }
    std::filesystem::copy_file(std::filesystem::path(GEMMA4_SERVER_TEST_DIR) / "openai_client.mjs", dir / "openai_client.mjs",
                               std::filesystem::copy_options::overwrite_existing);
    ServerProcess server({"--api-key", "node-key", "--parallel", "4", "--max-soft-tokens", "70", "--alias", "tiny-alias"}, "openai");
    const auto image = dir / "image.txt";
    std::ofstream(image) << png_data_url();
    const auto out = dir / "output.txt";
    const std::string run = "cd '" + dir.string() + "' && GEMMA4_BASE_URL=http://127.0.0.1:" + std::to_string(server.port()) +
                            "/v1 GEMMA4_API_KEY=node-key GEMMA4_MODEL=tiny GEMMA4_MODEL_ALIAS=tiny-alias GEMMA4_IMAGE_DATA_URL=\"$(cat '" + image.string() +
                            "')\" timeout 300 node openai_client.mjs >'" + out.string() + "' 2>&1";
    const int status = std::system(run.c_str());
    const std::string output = read_text(out);
    INFO(output);
    INFO(server.log());
    CHECK(status == 0);
    CHECK(output.find("openai client: ok") != std::string::npos);
}
