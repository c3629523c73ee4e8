// Entry point of the `xylem` program. Help and version go to stdout (exit 0); a usage error is
// one line on stderr with the command's usage after it (exit 2); any other failure is one line
// on stderr (exit 1).
#include <exception>
#include <iostream>

#include "commands.h"
#include "failure.h"

int main(int argc, char** argv) {
    using namespace xylem::cli;
    Args args;  // its command names the usage line of errors the commands themselves raise
    try {
        args = parse_args(argc, argv);
        if (args.help) {
            std::cout << command_help(args.command);
            return 0;
        }
        if (args.command == "help") return run_help(args);
        if (args.command == "version") return run_version(args);
        if (args.command == "backends") return run_backends(args);
        if (args.command == "train") return run_train(args);
        if (args.command == "eval") return run_eval(args);
        if (args.command == "predict") return run_predict(args);
        if (args.command == "sample") return run_sample(args);
        if (args.command == "plot") return run_plot(args);
        if (args.command == "run") return run_onnx_run(args);
        if (args.command == "import") return run_import(args);
        if (args.command == "export") return run_export(args);
        throw UsageError{"unknown command '" + args.command + "'", ""};  // in the table, not dispatched here: a bug
    } catch (const UsageError& e) {
        const std::string command = !e.command.empty() ? e.command : args.command;
        std::cerr << "xylem: " << e.message << "\n";
        if (argc < 2) std::cerr << "\n" << overview();
        else if (command.empty()) std::cerr << "run 'xylem help' for the list of commands\n";
        else std::cerr << usage_lines(command) << "run 'xylem help " << command << "' for its options\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "xylem: error: " << failure_text(e, args) << "\n";  // never a bare "std::bad_alloc"
        return 1;
    } catch (...) {
        std::cerr << "xylem: error: " << (args.command.empty() ? "xylem" : activity(args))
                  << " failed unexpectedly (an exception of unknown type; please report it)\n";
        return 1;
    }
}
