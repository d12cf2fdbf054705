#ifndef LULL_FAULT_CHECK_H
#define LULL_FAULT_CHECK_H

#include "CLullShims.h"

// The check at the top of every shim in the seam (faults.c): one relaxed load of a flag
// that is 0 unless a test armed a fault, then the table only when it is set.

int lull_fault_take_armed(lull_call call);

/// The errno to inject into this call of `call`, or 0 to make the real call.
static inline int lull_fault_take(lull_call call) {
    if (__builtin_expect(__atomic_load_n(&lull_faults_armed, __ATOMIC_RELAXED) == 0, 1)) return 0;
    return lull_fault_take_armed(call);
}

#endif
