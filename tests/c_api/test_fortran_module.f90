! The Fortran module's own code (bindings/fortran/kformer.f90), beyond the C API it binds: the
! generic array helpers in both precisions, their shape checks (a non-zero status, a message
! naming both arrays and shapes, the output left unwritten) and the precision refusals reaching
! Fortran by name. A float32 model against the double one of the same seed.
program test_fortran_module
  use, intrinsic :: iso_c_binding
  use kformer
  implicit none
  character(len=*), parameter :: base = '{"model": {"state_dim": 3, "d_model": 8, "heads": 2, ' // &
    '"layers": 1, "dim_feedforward": 16, "seed": 5'
  type(c_ptr) :: double_model, float_model
  real(c_double) :: x(3, 4, 2), y(3, 4, 2), target(3, 4, 2), wrong(3, 5, 2), loss, first
  real(c_float) :: xf(3, 4, 2), yf(3, 4, 2), targetf(3, 4, 2)
  integer :: failures, i, j, k, step

  failures = 0
  call expect(kformer_initialize() == KFORMER_OK, "kformer_initialize")
  call expect(kformer_model_create_from_string(c_string(base // '}}'), double_model) == KFORMER_OK, &
              "create the float64 model")
  call expect(kformer_model_create_from_string(c_string(base // ', "precision": "float32"}}'), &
                                               float_model) == KFORMER_OK, &
              "create the float32 model")
  do k = 1, 2
    do j = 1, 4
      do i = 1, 3
        x(i, j, k) = sin(0.7d0 * i + 0.3d0 * j - 0.5d0 * k)
        target(i, j, k) = cos(0.4d0 * i - 0.2d0 * j + 0.1d0 * k)
      end do
    end do
  end do
  xf = real(x, c_float)
  targetf = real(target, c_float)

  ! Both precisions through the same generic names; float agrees with double to its rounding.
  call expect(kformer_forward_array(double_model, x, y) == KFORMER_OK, "forward (float64)")
  call expect(kformer_forward_array(float_model, xf, yf) == KFORMER_OK, "forward (float32)")
  call expect(maxval(abs(yf - y) / (1 + abs(y))) < 1d-5, "float32 outputs within 1e-5 of float64")
  call expect(maxval(abs(yf - y)) > 0, "float32 outputs computed in float, not copied")

  ! Shapes that differ: refused by the module itself, with its message, nothing written.
  wrong = -7
  call expect_error(kformer_forward_array(double_model, x, wrong), KFORMER_ERROR_ARGUMENT, &
                    "kformer_forward_array: output has shape (3, 5, 2) but input has shape " // &
                    "(3, 4, 2); they must be equal")
  call expect(all(wrong == -7), "output unwritten after a shape error")
  call expect_error(kformer_train_step_array(double_model, x, wrong, loss), &
                    KFORMER_ERROR_ARGUMENT, "kformer_train_step_array: target has shape " // &
                    "(3, 5, 2) but input has shape (3, 4, 2)")

  ! Arrays of the other precision: the C API names the function to call.
  call expect_error(kformer_forward_array(double_model, xf, yf), KFORMER_ERROR_ARGUMENT, &
                    "the arrays given are float32: call kformer_forward instead")
  call expect_error(kformer_train_step_array(float_model, x, target, loss), &
                    KFORMER_ERROR_ARGUMENT, "call kformer_train_step_f32 instead")

  ! The float32 model trains through the generic helper.
  call expect(kformer_train_step_array(float_model, xf, targetf, first) == KFORMER_OK, &
              "train (float32)")
  do step = 1, 20
    call expect(kformer_train_step_array(float_model, xf, targetf, loss) == KFORMER_OK, &
                "train (float32)")
  end do
  call expect(loss < first, "training lowers the float32 model's loss")

  call expect(kformer_model_destroy(double_model) == KFORMER_OK, "destroy")
  call expect(kformer_model_destroy(float_model) == KFORMER_OK, "destroy")
  call expect(kformer_finalize() == KFORMER_OK, "kformer_finalize")
  if (failures /= 0) error stop 1
  print '(a)', "test_fortran_module: every check passed"

contains

  subroutine expect(condition, what)
    logical, intent(in) :: condition
    character(len=*), intent(in) :: what
    if (.not. condition) then
      print '(2a)', "FAIL: ", what
      if (len(kformer_error_message()) > 0) print '(2a)', "  last error: ", kformer_error_message()
      failures = failures + 1
    end if
  end subroutine

  subroutine expect_error(status, expected_status, expected_message)
    integer(c_int), intent(in) :: status, expected_status
    character(len=*), intent(in) :: expected_message
    if (status /= expected_status .or. index(kformer_error_message(), expected_message) == 0) then
      print '(a, i0, a, i0)', "FAIL: status ", status, ", expected ", expected_status
      print '(2a)', "  message:  ", kformer_error_message()
      print '(2a)', "  expected: ", expected_message
      failures = failures + 1
    end if
  end subroutine

end program
