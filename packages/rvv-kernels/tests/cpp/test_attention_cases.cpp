// The attention case directory as a whole: every group its index lists is a test
// of this driver and every case file belongs to a listed group, so no case file
// goes unrun.
#include <filesystem>
#include <string>

#include "case_file.h"
#include "harness.h"

RVVK_TEST(attention_case_files) {
  try {
    const auto index = rvvk_test::case_index();
    CHECK_MSG(!index.empty(), "%s/cases.txt lists no group", rvvk_test::cases_dir().c_str());
    auto registered = [](const std::string& group) {
      for (const auto& [name, fn] : rvvk_test::registry())
        if (name == group) return true;
      return false;
    };
    for (const auto& [group, n] : index)
      CHECK_MSG(registered(group), "case group %s (%zu files) has no test here", group.c_str(), n);
    for (const auto& e : std::filesystem::directory_iterator(rvvk_test::cases_dir())) {
      if (e.path().extension() != ".case") continue;
      const std::string name = e.path().filename().string();
      CHECK_MSG(index.count(name.substr(0, name.rfind('-'))) == 1,
                "%s belongs to no group of the index", name.c_str());
    }
  } catch (const std::exception& e) {
    CHECK_MSG(false, "%s", e.what());
  }
}
