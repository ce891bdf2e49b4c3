#include "core/base/status.h"
