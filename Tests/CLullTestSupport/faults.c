#include "CLullTestSupport.h"

// Arming of the library's fault table (CLullShims.h, "Fault injection seam"; its state
// model is in Sources/CLullShims/faults.c). The library reads and consumes the entries;
// only the tests write them.

void lull_fault_arm(lull_call call, int errno_value, int count) {
    if ((unsigned)call >= LULL_CALL_COUNT) return;
    __atomic_store_n(&lull_fault_table[call].errno_value, errno_value, __ATOMIC_RELAXED);
    __atomic_store_n(&lull_fault_table[call].remaining, count, __ATOMIC_RELEASE);
    __atomic_store_n(&lull_faults_armed, 1, __ATOMIC_RELEASE);
}

void lull_fault_disarm_all(void) {
    __atomic_store_n(&lull_faults_armed, 0, __ATOMIC_RELEASE);
    for (int call = 0; call < LULL_CALL_COUNT; call++) {
        __atomic_store_n(&lull_fault_table[call].remaining, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&lull_fault_table[call].hits, 0, __ATOMIC_RELAXED);
    }
}

int lull_fault_hits(lull_call call) {
    if ((unsigned)call >= LULL_CALL_COUNT) return 0;
    return __atomic_load_n(&lull_fault_table[call].hits, __ATOMIC_ACQUIRE);
}
