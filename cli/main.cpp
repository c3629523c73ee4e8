// Entry point of the `xylem` program: every failure becomes one line on stderr and exit 1.
#include <exception>
#include <iostream>

#include "commands.h"

int main(int argc, char** argv) {
    using namespace xylem::cli;
    try {
        Args args = parse_args(argc, argv);
        if (args.command == "backends") return run_backends(args);
        if (args.command == "train") return run_train(args);
        if (args.command == "eval") return run_eval(args);
        std::cout << usage();
        return args.command == "help" ? 0 : 2;
    } catch (const UsageError& e) {
        std::cerr << "xylem: " << e.message << "\n" << usage();
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "xylem: error: " << e.what() << "\n";
        return 1;
    } catch (...) {
        std::cerr << "xylem: error: unexpected failure\n";
        return 1;
    }
}
