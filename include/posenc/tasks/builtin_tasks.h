// Registry entries of the tasks (one line each in tasks/registry.cpp).
#pragma once

#include "posenc/tasks/registry.h"

namespace posenc {

TaskInfo ordering_task_info();  // tasks/ordering.cpp
TaskInfo copy_task_info();      // tasks/sequence.cpp
TaskInfo reverse_task_info();
TaskInfo sort_task_info();
TaskInfo addition_task_info();  // tasks/arithmetic.cpp
TaskInfo multiplication_task_info();
TaskInfo charlm_task_info();       // tasks/charlm.cpp
TaskInfo scan_task_info();         // tasks/scan.cpp
TaskInfo translation_task_info();  // tasks/translation.cpp

}  // namespace posenc
