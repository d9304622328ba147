import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            s = r.get_response_sender()
            for k in range(3):
                s.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + k)]))
            s.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
