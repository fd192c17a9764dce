// Reference encoders for k-quants (in progress).
#include "core/check.h"
#include "core/quant_ref.h"

namespace tern {
void quantize_block_ref(const float*, BlockQ2_K*) { TERN_CHECK_MSG(false, "q2_k encoder not written yet"); }
void quantize_block_ref(const float*, BlockQ3_K*) { TERN_CHECK_MSG(false, "q3_k encoder not written yet"); }
void quantize_block_ref(const float*, BlockQ4_K*) { TERN_CHECK_MSG(false, "q4_k encoder not written yet"); }
void quantize_block_ref(const float*, BlockQ5_K*) { TERN_CHECK_MSG(false, "q5_k encoder not written yet"); }
void quantize_block_ref(const float*, BlockQ6_K*) { TERN_CHECK_MSG(false, "q6_k encoder not written yet"); }
void quantize_block_ref(const float*, BlockQ8_K*) { TERN_CHECK_MSG(false, "q8_k encoder not written yet"); }
}  // namespace tern
